"""The memory-model core: what a runtime is asked about, and the questions themselves.

Below the runtimes and above ``spec`` and ``models`` (the layer order is in
``.importlinter``; ``make lint`` checks it): the data types a runtime answers
about (:mod:`~layoutgen.core.setting`'s :class:`Setting`, tensors placed by
:mod:`~layoutgen.core.placement`, the KV cache of :mod:`~layoutgen.core.kvcache`,
``-ot`` rules in :mod:`~layoutgen.core.override`), the dated-rule machinery
(:mod:`~layoutgen.core.rules`), and :class:`~layoutgen.core.runtime.Runtime`, the
interface every runtime package implements.  Nothing here imports
``layoutgen.runtimes``, ``solve``, ``render`` or a command.
"""
