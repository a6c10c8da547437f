"""Reading what users write, below every other layer: YAML documents with their
positions and size bounds (:mod:`~layoutgen.inputs.source`,
:mod:`~layoutgen.inputs.yamlbounds`), schema errors as file:line:col diagnostics
(:mod:`~layoutgen.inputs.schema_errors`), printable literals
(:mod:`~layoutgen.inputs.literals`) and the accepted ``tensor_overrides`` pattern
language (:mod:`~layoutgen.inputs.patterns`).

Profiles (``models``), the core's ``-ot`` rules and the runtimes read inputs too,
so these sit below them; the spec's own schema and checks (``layoutgen.spec``) sit
above the runtimes, whose rules they validate against.
"""
