"""The daily LoRA update (seed 000): a systemd timer and a one-shot service per adapter.

Quadlet has no timers, so both targets get plain ``.timer`` + ``.service``
units (installed beside the service's own units, in ``/etc/systemd/system``
or ``~/.config/systemd/user``).  The one-shot runs :data:`UPDATE`, a fixed
bash program: every value (directories, names, the port) reaches it as a
positional parameter, never as code, so quoting is systemd's alone
(:func:`layoutgen.render.quoting.systemd_line`).  It takes the newest
sub-directory of ``update.dir`` (by modification time), checks its
``adapter_config.json`` -- ``base_model_name_or_path`` names the service's
model (equal, or the same last path component: ``Qwen/Qwen3-32B`` names a
checkpoint directory ``Qwen3-32B``) and ``r`` <= ``max_lora_rank`` -- and
then either loads it through vLLM's runtime endpoint (``apply: load``:
``POST /v1/unload_lora_adapter`` then ``/v1/load_lora_adapter``; vLLM 0.11.0
refuses to load a name already loaded, ``serving_models.py:191-198``) or
restarts the service if it runs (``apply: restart``).  Either way the
adapter's ``path`` (a symbolic link) is pointed at it afterwards, so a later
start serves the same adapter.  A failed check changes nothing, prints one
line naming the adapter, what it found and the limit, and exits 1: the unit
fails visibly (``Restart=no``; the timer fires again the next day).

The API key, when the service has one, is read when the update runs from
the podman secret (``podman secret inspect --showsecret``) and handed to
curl on its standard input (``-H @-``), never in an argument or a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from layoutgen.render import quoting, sandbox
from layoutgen.render.oneshot import checked, daily_timer
from layoutgen.solve.argv import UPDATES_DIR, adapter_path
from layoutgen.spec.checks import DEFAULT_LORA_RANK, lora_base
from layoutgen.spec.roles import ResolvedService
from layoutgen.spec.schema import LoraAdapter, Spec

#: The update program (bash: ``-nt`` and ``[[ =~ ]]``).  Parameters: adapter name,
#: update directory, the adapter's path (a link), the base model, the rank limit,
#: load|restart, port, unit, the update directory as the server sees it, the
#: adapter's start-up path as the server sees it, the podman secret ("" for none).
UPDATE = r"""set -eu
name=$1 dir=$2 link=$3 base=$4 max_rank=$5 mode=$6 port=$7 unit=$8
served=$9 startup=${10} secret=${11}
fail() {
  printf 'lora update %s: %s; the running adapter is left in place\n' "$name" "$1" >&2
  exit 1
}
newest=
for d in "$dir"/*/; do
  [ -d "$d" ] || continue
  d=${d%/}
  if [ -z "$newest" ] || [ "$d" -nt "$newest" ]; then
    newest=$d
  fi
done
[ -n "$newest" ] || fail "no adapter directory in $dir"
leaf=${newest##*/}
[[ $leaf =~ ^[A-Za-z0-9._-]+$ ]] || fail "adapter directory name $leaf is not plain"
config=$newest/adapter_config.json
[ -f "$config" ] || fail "adapter $newest has no adapter_config.json"
json=$(head -c 1048576 -- "$config")
re_base='"base_model_name_or_path"[[:space:]]*:[[:space:]]*"([^"\\]*)"'
re_rank='"r"[[:space:]]*:[[:space:]]*([0-9]{1,6})[^0-9]'
[[ $json =~ $re_base ]] || fail "adapter $newest names no base_model_name_or_path"
found=${BASH_REMATCH[1]}
[[ $json =~ $re_rank ]] || fail "adapter $newest gives no rank r"
rank=${BASH_REMATCH[1]}
trimmed=${found%/}
if [ "$found" != "$base" ] && [ "${trimmed##*/}" != "${base##*/}" ]; then
  fail "adapter $newest was trained on $found, not on $base"
fi
if [ $((10#$rank)) -gt "$max_rank" ]; then
  fail "adapter $newest has rank $rank, above max_lora_rank $max_rank"
fi
if [ -e "$link" ] && [ ! -L "$link" ]; then
  fail "$link is not a symbolic link (make it one to the adapter it serves)"
fi
if [ "$(readlink -- "$link" || true)" = "$newest" ]; then
  printf 'lora update %s: %s is already served\n' "$name" "$newest"
  exit 0
fi
post() {
  if [ -n "$secret" ]; then
    key=$(podman secret inspect --showsecret --format '{{.SecretData}}' -- "$secret")
    printf 'Authorization: Bearer %s\n' "$key" | curl -fsS -X POST -H @- \
      -H 'Content-Type: application/json' --data-binary "$2" "http://127.0.0.1:$port$1"
  else
    curl -fsS -X POST -H 'Content-Type: application/json' --data-binary "$2" \
      "http://127.0.0.1:$port$1"
  fi
}
if [ "$mode" = load ]; then
  previous=$startup
  current=$(readlink -- "$link" || true)
  if [ "${current%/*}" = "$dir" ]; then
    previous=$served/${current##*/}
  fi
  post /v1/unload_lora_adapter "{\"lora_name\":\"$name\"}" || true
  if ! post /v1/load_lora_adapter "{\"lora_name\":\"$name\",\"lora_path\":\"$served/$leaf\"}"; then
    post /v1/load_lora_adapter "{\"lora_name\":\"$name\",\"lora_path\":\"$previous\"}" || true
    fail "vLLM refused to load adapter $newest"
  fi
fi
ln -sfn -- "$newest" "$link.layoutgen-new"
mv -fT -- "$link.layoutgen-new" "$link"
if [ "$mode" = restart ]; then
  if [ "$(id -u)" = 0 ]; then
    systemctl try-restart -- "$unit"
  else
    systemctl --user try-restart -- "$unit"
  fi
fi
printf 'lora update %s: now serving %s (rank %s)\n' "$name" "$newest" "$rank"
"""


@dataclass(frozen=True)
class UpdateUnits:
    """One adapter's daily update: ``<name>.service`` (one-shot) and ``<name>.timer``."""

    name: str
    description: str
    service: dict[str, list[tuple[str, str]]]
    timer: dict[str, list[tuple[str, str]]]


def unit_name(service: str, adapter: str) -> str:
    return f"{service}-lora-{adapter}"


def _secret(rs: ResolvedService) -> str:
    """The podman secret holding the server's API key, "" when it has none."""
    key = rs.service.api_key
    return key.secret if key is not None and key.secret is not None else ""


def update_argv(spec: Spec, rs: ResolvedService, adapter: LoraAdapter) -> list[str]:
    """The one-shot's command line: ``bash -c UPDATE`` and its positional parameters."""
    lora = rs.service.lora
    update = adapter.update
    assert lora is not None and update is not None
    native = spec.runtimes[rs.service.runtime].image is None
    served = update.dir if native else str(UPDATES_DIR / adapter.name)
    secret = _secret(rs)
    return [
        "/bin/bash", "-c", UPDATE, "lora-update",
        adapter.name, str(PurePosixPath(update.dir)), adapter.path, lora_base(spec, rs),
        str(lora.max_lora_rank or DEFAULT_LORA_RANK), update.apply, str(rs.service.port),
        f"{rs.name}.service", served, adapter_path(spec, rs, adapter.name, adapter.path),
        secret,
    ]  # fmt: skip


def update_units(spec: Spec, rs: ResolvedService) -> list[UpdateUnits]:
    lora = rs.service.lora
    out: list[UpdateUnits] = []
    for adapter in () if lora is None else lora.adapters:
        update = adapter.update
        if update is None:
            continue
        name = unit_name(rs.name, adapter.name)
        how = "load" if update.apply == "load" else "restart"
        description = (
            f"layoutgen: daily LoRA update of {rs.name} adapter {adapter.name} "
            f"(newest checked adapter in {update.dir}, then {how})"
        )
        unit_section = [("Description", description), ("After", f"{rs.name}.service")]
        if update.apply == "load":
            # the endpoint needs the server up; a stopped service fails the update visibly
            unit_section.append(("Requisite", f"{rs.name}.service"))
        service = {
            "Unit": unit_section,
            "Service": [
                ("Type", "oneshot"),
                ("ExecStart", quoting.systemd_line(update_argv(spec, rs, adapter))),
                ("Restart", "no"),
                ("TimeoutStartSec", "600s"),
                *sandbox.updater(
                    writable=str(PurePosixPath(adapter.path).parent),
                    podman=_secret(rs) != "",
                    restart=update.apply == "restart",
                ),
            ],
        }
        timer = daily_timer(description, [update.at], name, catch_up=True)
        checked(service, timer)
        out.append(UpdateUnits(name, description, service, timer))
    return out
