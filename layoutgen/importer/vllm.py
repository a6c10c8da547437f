"""The spec fragment for a vLLM command: ``vllm serve``, ``python -m
vllm.entrypoints.openai.api_server``, or a vLLM image in podman, quadlet or systemd.

Why its own reader: vLLM's flags share nothing with llama.cpp's, and layoutgen
renders the ones that size memory from spec keys (README "vLLM services"):
``--max-model-len`` is ``ctx``, ``--max-num-seqs`` ``max_num_seqs`` (and
``parallel``, the full-length requests the KV holds: one without it),
``--max-num-batched-tokens`` ``batch``, ``--tensor-parallel-size`` the GPU
count, ``--kv-cache-dtype``, ``--speculative-config``, ``--enforce-eager``,
``--served-model-name``; ``--gpu-memory-utilization`` is replaced by the plan's
own budget, and said so with the command's figure.  The rest passes through in
``args``; the server's own environment variables (``VLLM_*``, ``CUDA_*``,
``NCCL_*``, ``PYTORCH_*``) go to ``env``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from layoutgen.importer.cmdline import Command, Word
from layoutgen.importer.devices import SpecGpu
from layoutgen.importer.tospec import (
    MAX_ARGS,
    Arg,
    Imported,
    _dropped,
    _gpu_ids,
    _host_path,
    _Out,
    _port,
    _version,
    emit,
)
from layoutgen.inputs.literals import MAX_TEXT, clip
from layoutgen.spec.schema import ENV_OWNED, ENV_PREFIXES, SECRET_WORDS

#: vLLM flags that take no value (store_true, and their --no- forms)
_BOOLEAN = frozenset(
    [
        "--enforce-eager",
        "--trust-remote-code",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--enable-chunked-prefill",
        "--no-enable-chunked-prefill",
        "--disable-log-requests",
        "--enable-log-requests",
        "--disable-log-stats",
        "--enable-auto-tool-choice",
        "--disable-custom-all-reduce",
        "--enable-expert-parallel",
        "--async-scheduling",
        "--language-model-only",
        "--skip-tokenizer-init",
        "--disable-frontend-multiprocessing",
        "--enable-lora",
        "--enable-sleep-mode",
        "--enable-prompt-tokens-details",
        "--enable-server-load-tracking",
        "--disable-fastapi-docs",
        "--enable-request-id-headers",
        "--disable-sliding-window",
        "--disable-cascade-attn",
        "--fully-sharded-loras",
        "--enable-force-include-usage",
        "--enable-reasoning",
        "--enable-log-outputs",
        "--headless",
        "--return-tokens-as-token-ids",
    ]
)


@dataclass(frozen=True)
class _Flag:
    name: str
    words: tuple[Word, ...]
    value: Word | None


def _flags(command: Command) -> tuple[Word | None, list[_Flag]]:
    """The positional model (``vllm serve MODEL``) and each flag with its value."""
    words = list(command.args)
    model = None
    if words and not words[0].text.startswith("-"):
        model, words = words[0], words[1:]
    out: list[_Flag] = []
    i = 0
    while i < len(words):
        w = words[i]
        name, eq, val = w.text.partition("=")
        if not w.text.startswith("-"):
            out.append(_Flag("", (w,), None))  # a word no flag reads: passed through
            i += 1
        elif eq and name.startswith("--"):
            out.append(_Flag(name, (w,), Word(val, w.line, w.col + len(name) + 1)))
            i += 1
        elif name in _BOOLEAN or i + 1 >= len(words) or words[i + 1].text.startswith("--"):
            out.append(_Flag(name, (w,), None))
            i += 1
        elif name == "--lora-modules":  # nargs='+': every word up to the next option
            j = i + 1
            while j < len(words) and not words[j].text.startswith("-"):
                j += 1
            out.append(_Flag(name, tuple(words[i:j]), words[i + 1]))
            i = j
        else:
            out.append(_Flag(name, (w, words[i + 1]), words[i + 1]))
            i += 2
    return model, out


_SPELLINGS = {
    "--model": "model",
    "--max-model-len": "ctx",
    "--max-num-seqs": "parallel",
    "--max-num-batched-tokens": "batch",
    "-tp": "tp",
    "--tensor-parallel-size": "tp",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--speculative-config": "speculative",
    "--enforce-eager": "enforce_eager",
    "--served-model-name": "served_model_name",
    "--gpu-memory-utilization": "utilization",
    "--kv-cache-memory-bytes": "kv_bytes",
    "--host": "host",
    "--port": "port",
    "--api-key": "api_key",
    "--block-size": "block_size",
    "-pp": "pp",
    "--pipeline-parallel-size": "pp",
    "-dp": "dp",
    "--data-parallel-size": "dp",
    "--enable-lora": "enable_lora",
    "--lora-modules": "lora_modules",
    "--max-loras": "max_loras",
    "--max-lora-rank": "max_lora_rank",
    "--max-cpu-loras": "max_cpu_loras",
}


def _number(text: str) -> int | None:
    """vLLM's integers: ``32768``, and from 0.10 the human forms ``32k``, ``1M``."""
    m = re.fullmatch(r"(\d{1,9})([kKmM]?)", text.strip())
    if m is None:
        return None
    scale = {"": 1, "k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}[m.group(2)]
    return int(m.group(1)) * scale


def vllm_spec(
    command: Command,
    *,
    name: str | None = None,
    gpus: Sequence[SpecGpu] | None = None,
    log: tuple[str, str] | None = None,
    made: tuple[str, str] | None = None,
) -> Imported:
    """The ``models``/``runtimes``/``services`` YAML that reproduces a vLLM command."""
    positional, flags = _flags(command)
    out = _Out(command)
    last: dict[str, _Flag] = {}
    args = CommentedSeq()
    for f in flags:
        key = _SPELLINGS.get(f.name)
        if key is None:
            for w in f.words:
                if len(w.text) > MAX_TEXT or len(args) >= MAX_ARGS:
                    out.warn(w, "too long, or too many arguments for args: dropped")
                    break
                args.append(w.text)
            continue
        if key in last and key != "api_key":
            out.warn(f.words[0], f"{f.name} given again: the last one counts, as in vLLM")
        last[key] = f

    def text(key: str) -> str:
        f = last.get(key)
        return f.value.text if f is not None and f.value is not None else ""

    model_word = (
        last["model"].value if "model" in last and last["model"].value else None
    ) or positional
    model_id, model = _model(command, model_word, out)
    runtime = CommentedMap({"kind": "vllm"})
    if command.image is not None:
        runtime["image"] = command.image.text
    else:
        path = command.program_word.text if command.program_word else "vllm"
        runtime["binary"] = path
        out.warn(
            command.program_word,
            "a vLLM server outside a container: layoutgen renders vLLM as its image "
            "(write runtimes.vllm.image: the vllm/vllm-openai tag of this release)",
        )
    _version(command, runtime, log, out)

    service = name or command.container_name or re.sub(r"[^a-z0-9-]+", "-", model_id)
    service = re.sub(r"-+", "-", service.lower()).strip("-")[:63] or "server"
    out.put("model", model_id)
    out.put("runtime", "vllm")
    out.put("role", "worker", "vLLM serves requests; no experts to split")
    port = last.get("port")
    given = {} if port is None else {"port": Arg(port.name, "port", port.words, port.value)}
    _port(command, given, out, (8000, "vllm serve"))
    ctx = _number(text("ctx")) if "ctx" in last else None
    if ctx is None:
        out.put("ctx", 0, "no --max-model-len: 0 is the model's trained context, as vLLM")
    else:
        out.put("ctx", ctx)
    tp = _number(text("tp")) if "tp" in last else 1
    ids = _gpu_ids(command, (), {}, None, gpus, out) or []
    if tp and len(ids) != tp and not (command.devices or _visible(command)):
        ids = [g.id for g in sorted(gpus or (), key=lambda g: g.index or 0)][:tp] or [
            f"gpu{i}" for i in range(tp)
        ]
    elif tp and len(ids) > tp:
        out.warn(
            last["tp"].words[0] if "tp" in last else None,
            f"tensor parallel {tp} on {len(ids)} visible GPUs: vLLM uses the first {tp}",
        )
        ids = ids[:tp]
    seq = CommentedSeq(ids)
    seq.fa.set_flow_style()
    out.put("gpus", seq, f"tensor parallel {tp}" if tp and tp > 1 else None)
    parallel = _number(text("parallel")) if "parallel" in last else None
    out.put(
        "parallel",
        parallel or 1,
        None
        if parallel
        else "no --max-num-seqs: the scheduler keeps vLLM's default (max_num_seqs "
        "unwritten), and the KV must hold one request of max-model-len, as vLLM's "
        "start check asks; write how many full-length requests it must hold",
    )
    if parallel:  # the scheduler's limit too; the KV holds 'parallel' requests
        out.put("max_num_seqs", parallel)
    batch = _number(text("batch")) if "batch" in last else None
    out.put(
        "batch",
        batch or 2048,
        None
        if batch
        else "no --max-num-batched-tokens: vLLM's default for the OpenAI "
        "server (2048; some releases take 8192 on large GPUs): write what yours ran",
    )
    _kv_dtype(last.get("kv_cache_dtype"), out)
    _speculative(last.get("speculative"), out)
    if "enforce_eager" in last:
        out.put("enforce_eager", True)
    if text("served_model_name"):
        out.put("served_model_name", text("served_model_name"))
    _lora(command, last, out)
    _replaced(last, out)
    _bind(command, last.get("host"), out)
    _env(command, out)
    if args:
        out.put("args", args)
    _dropped(replace(command, env=()), out)
    return emit(out, (model_id, model), ("vllm", runtime), service, made)


def _visible(command: Command) -> bool:
    return any(e.name == "CUDA_VISIBLE_DEVICES" for e in command.env)


def _model(command: Command, word: Word | None, out: _Out) -> tuple[str, CommentedMap]:
    model = CommentedMap()
    if word is None:
        out.warn(command.program_word, "no model: write the checkpoint directory in path:")
        model["path"], model_id = "", "model"
    else:
        base = word.text.rstrip("/").rsplit("/", 1)[-1]
        model_id = re.sub(r"[^a-z0-9_.-]+", "-", base.lower()).strip("-._")[:63] or "model"
        if word.text.startswith("/"):
            model["path"] = _host_path(command, word.text, out, word)
        else:
            model["path"] = ""
            out.warn(
                word,
                f"{clip(word.text)} is a Hugging Face repository id: download it "
                f"('hf download {word.text}') and write its directory in path:",
            )
    model["profile"] = f"models/{model_id}.yaml"
    model.yaml_add_eol_comment(
        f"layoutgen inspect {model['path'] or 'CHECKPOINT_DIR'} -o {model['profile']}", "profile"
    )
    return model_id, model


def _kv_dtype(f: _Flag | None, out: _Out) -> None:
    if f is None or f.value is None:
        return
    value = f.value.text
    if value in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"):
        out.put("kv_cache_dtype", value)
    else:
        out.warn(f.words[0], f"--kv-cache-dtype {clip(value)} is not one layoutgen plans: dropped")
        out.notes.append(f"dropped --kv-cache-dtype {value}: layoutgen plans auto and fp8 caches")


def _speculative(f: _Flag | None, out: _Out) -> None:
    if f is None or f.value is None:
        return
    try:
        doc = json.loads(f.value.text)
    except json.JSONDecodeError:
        doc = None
    method = str(doc.get("method", "")) if isinstance(doc, dict) else ""
    n = doc.get("num_speculative_tokens") if isinstance(doc, dict) else None
    if (
        ("mtp" in method or method == "")
        and isinstance(n, int)
        and n >= 1
        and not (isinstance(doc, dict) and doc.get("model"))
    ):
        spec = CommentedMap({"method": "mtp", "num_tokens": n})
        spec.fa.set_flow_style()
        out.put("speculative", spec, f"--speculative-config {f.value.text}")
        return
    out.warn(
        f.words[0],
        f"--speculative-config {clip(f.value.text)}: layoutgen plans MTP speculation "
        "({method: mtp, num_tokens: N}) and draft models under models:; dropped: write "
        "speculative: for it",
    )
    out.notes.append(f"dropped --speculative-config {f.value.text}")


def _lora(command: Command, last: dict[str, _Flag], out: _Out) -> None:
    """``--lora-modules NAME=PATH ...`` (or its JSON form) with the slot flags, to ``lora:``;
    the paths through the container's volumes."""
    modules = last.get("lora_modules")
    if modules is None:
        for key in ("enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras"):
            if key in last:
                line = f"dropped {last[key].words[0].text}: no --lora-modules to serve"
                out.warn(last[key].words[0], line)
                out.notes.append(line)
        return
    adapters = CommentedSeq()
    for w in modules.words[1:]:
        try:
            doc = json.loads(w.text) if w.text.startswith("{") else None
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            name, path = str(doc.get("name", "")), str(doc.get("path", ""))
        else:
            name, _, path = w.text.partition("=")
        if not name or not path.startswith("/"):
            out.warn(w, f"--lora-modules {clip(w.text)}: not NAME=/ABSOLUTE/PATH: dropped")
            continue
        item = CommentedMap({"name": name, "path": _host_path(command, path, out, w)})
        item.fa.set_flow_style()
        adapters.append(item)
    if not adapters:
        return
    lora = CommentedMap()
    for key in ("max_loras", "max_lora_rank", "max_cpu_loras"):
        f = last.get(key)
        n = _number(f.value.text) if f is not None and f.value is not None else None
        if n is not None:
            lora[key] = n
    lora["adapters"] = adapters
    out.put("lora", lora)


def _replaced(last: dict[str, _Flag], out: _Out) -> None:
    """Flags whose value the plan decides: said, with the command's figure."""
    util = last.get("utilization")
    value = util.value.text if util is not None and util.value is not None else "0.9"
    note = (
        f"--gpu-memory-utilization {value}"
        + ("" if util is not None else " (vLLM's default)")
        + ": replaced by the plan's own budget (layoutgen plan prints it and the "
        "utilization it renders); vLLM refuses to start when less than it is free"
    )
    out.notes.append(note)
    if util is not None:
        out.warn(util.words[0], note)
    for key, why in (
        ("kv_bytes", "the plan sizes the KV cache from ctx and parallel"),
        ("block_size", "layoutgen plans vLLM's default 16-token blocks"),
        ("pp", "layoutgen plans tensor parallelism only"),
        ("dp", "layoutgen plans tensor parallelism only"),
    ):
        f = last.get(key)
        if f is not None:
            line = f"dropped {' '.join(w.text for w in f.words)}: {why}"
            out.warn(f.words[0], line)
            out.notes.append(line)
    key_flag = last.get("api_key")
    if key_flag is not None:
        out.warn(
            key_flag.words[0],
            "--api-key: the key on the command line was dropped (it would land in every "
            "rendered file); store it with 'podman secret create NAME -' and write "
            "api_key: {secret: NAME}",
        )


def _bind(command: Command, host: _Flag | None, out: _Out) -> None:
    if command.image is not None or host is None or host.value is None:
        return
    if host.value.text not in ("127.0.0.1", "localhost", "::1"):
        out.put("expose", True, f"--host {host.value.text}")
        out.warn(host.words[0], f"--host {clip(host.value.text)}: listens beyond this machine")


def _env(command: Command, out: _Out) -> None:
    """The server's own variables to ``env``; CUDA_VISIBLE_DEVICES is ``gpus``."""
    env = CommentedMap()
    for e in command.env:
        if e.name in ENV_OWNED:
            continue
        if e.name == "VLLM_ALLOW_RUNTIME_LORA_UPDATING":
            line = (
                f"dropped {e.name}: layoutgen sets it for an adapter with "
                "'update: {apply: load}' (write that under lora.adapters)"
            )
            out.warn(e.word, line)
            out.notes.append(line)
            continue
        if any(w in e.name for w in SECRET_WORDS):
            out.warn(e.word, f"{e.name} looks like a secret: not written (its value is not shown)")
            out.notes.append(f"dropped environment variable {e.name} (a secret)")
        elif e.name.startswith(ENV_PREFIXES) and re.fullmatch(
            r"[A-Za-z0-9_.,:/+=@-]{0,256}", e.value
        ):
            env[e.name] = e.value
        else:
            out.warn(e.word, f"environment variable {e.name} has no place in the spec: dropped")
            out.notes.append(f"dropped environment variable {e.name}")
    if env:
        env.fa.set_flow_style()
        out.put("env", env)
