#!/usr/bin/env bash
# Checks that dlock's layers point one way: every #include of a dlock header in the library, the
# plugins and the command names a header of the including file's own layer or of a layer it may use.
#
#   scripts/check-layers.sh          prints each layer and the layers its files include; exits 1 and
#                                    names file:line of every include that points the wrong way
#   scripts/check-layers.sh BUILD    also checks the objects of a build (e.g. build/release): no
#                                    layer of libdlock calls a function that a layer above it defines
#
# The layers, lowest first (docs/architecture.md explains them; see also the CMakeLists of each directory):
#   public   api/include: dlock.h, dlock.hpp, dlock_admin.h(pp), plugin.h — the contract
#   base     base/: errors, clock                                   may use kit (its clock), public
#   config   config/: YAML/DSN, option binding                      may use base, public
#   loader   loader/: plugin search and negotiation                 may use base, public
#   kit      plugins/kit: what plugins share                        may use public
#   plugin   plugins/<name>: one backend each                       may use kit, other plugin
#                                                                   directories (shared code), public
#   core     core/: clients, leases, keeper, built-in backends      may use base, config, loader, kit,
#                                                                   plugin (the built-in `file`), public
#   c_api    api/src: the C ABI of dlock.h and dlock_admin.h        may use core and all below
#   cli      cli/: the `dlock` command                              may use public only
# The build enforces the same order (each target sees only its own and lower layers' headers);
# this check also covers what a build option leaves out, and says where a wrong include is.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

layer_of() {  # path of a file -> its layer in $layer_found ("" when not in a layer); no subshell
  case "$1" in
    api/include/*) layer_found=public ;;
    base/*) layer_found=base ;;
    config/*) layer_found=config ;;
    loader/*) layer_found=loader ;;
    plugins/kit/*) layer_found=kit ;;
    plugins/*) layer_found=plugin ;;
    cli/*) layer_found=cli ;;
    core/*) layer_found=core ;;
    api/src/*) layer_found=c_api ;;
    *) layer_found="" ;;
  esac
}

allowed() {  # layer -> the layers it may include (besides its own)
  case "$1" in
    public) echo "" ;;
    base) echo "kit public" ;;
    config | loader) echo "base public" ;;
    kit) echo "public" ;;
    plugin) echo "kit public" ;;
    core) echo "base config loader kit plugin public" ;;
    c_api) echo "core base config loader kit plugin public" ;;
    cli) echo "public" ;;
  esac
}

# The directories a quoted include is searched in: the including file's own, then every layer's
# include directory (each CMake target adds its source directory).
search_dirs=(api/include base config loader core api/src cli plugins/kit/include)
for d in plugins/*/; do search_dirs+=("${d%/}"); done

resolve() {  # including file, include text, bracket or quote -> in $resolved the file it names
  local from=$1 name=$2 kind=$3 d    # ("" if not one of ours: a system, third-party or generated header)
  resolved=""
  if [ "$kind" = quote ] && [ -f "${from%/*}/$name" ]; then
    resolved="${from%/*}/$name"
    return
  fi
  [ "$kind" = bracket ] && [ "${name#dlock/}" = "$name" ] && return  # <...> of ours are <dlock/...>
  for d in "${search_dirs[@]}"; do
    if [ -f "$d/$name" ]; then
      resolved="$d/$name"
      return
    fi
  done
}

declare -A uses  # layer -> the layers it includes
violations=0
files=$(find api base config loader core plugins cli -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) 2>/dev/null | sort || true)
for file in $files; do
  layer_of "$file"
  layer=$layer_found
  [ -n "$layer" ] || continue
  while IFS= read -r hit; do
    line=${hit%%:*}
    text=${hit#*:}
    if [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
      included=${BASH_REMATCH[1]}
      resolve "$file" "$included" quote
    elif [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<(dlock/[^\>]+)\> ]]; then
      included=${BASH_REMATCH[1]}
      resolve "$file" "$included" bracket
    else
      continue
    fi
    target=$resolved
    [ -n "$target" ] || continue  # a generated or third-party header
    layer_of "$target"
    to=$layer_found
    [ -n "$to" ] && [ "$to" != "$layer" ] || continue
    # Between plugins: a plugin may use another plugin directory's shared code, not the reverse of
    # a layer; that is the same layer here.
    uses[$layer]="${uses[$layer]:-} $to"
    if [[ " $(allowed "$layer") " != *" $to "* ]]; then
      echo "$file:$line: includes $included ($target, layer $to), which layer $layer may not use" \
           "(allowed: $(allowed "$layer"))" >&2
      violations=$((violations + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$file" || true)
done

for layer in public base config loader kit plugin core c_api cli; do
  used=$(tr ' ' '\n' <<<"${uses[$layer]:-}" | sed '/^$/d' | sort -u | tr '\n' ' ')
  printf '%-7s includes: %s\n' "$layer" "${used:-(no other layer)}"
done
if [ "$violations" -gt 0 ]; then
  echo "check-layers: $violations include(s) point the wrong way" >&2
  exit 1
fi
echo "check-layers: every include points down"

# ---- calls, in a build: the symbols each layer's objects need, against what higher layers define
[ $# -ge 1 ] || exit 0
build=$1
objects_of() {  # layer -> its object files or archive in the build
  case "$1" in
    config) find "$build" -name libdlock_config.a ;;
    loader) find "$build" -name libdlock_loader.a ;;
    core) find "$build" -path '*/dlock_core.dir/*' -name '*.o' ;;
    c_api) find "$build" -path '*/dlock_c_api.dir/*' -name '*.o' ;;
  esac
}
strong_definitions() { nm -g --defined-only "$@" 2>/dev/null | awk '$2 ~ /^[TDBR]$/ {print $3}' | sort -u; }
link_layers=(config loader core c_api)
link_violations=0
for i in "${!link_layers[@]}"; do
  layer=${link_layers[$i]}
  mapfile -t own < <(objects_of "$layer")
  if [ ${#own[@]} -eq 0 ]; then
    echo "check-layers: no objects of $layer under $build (build it first)" >&2
    exit 1
  fi
  # Every layer that this one may not call: those above it, and its sibling.
  above=()
  for other in "${link_layers[@]}"; do
    [ "$other" = "$layer" ] && continue
    if [[ " $(allowed "$layer") " != *" $other "* ]]; then mapfile -t -O "${#above[@]}" above < <(objects_of "$other"); fi
  done
  [ ${#above[@]} -gt 0 ] || continue
  bad=$(comm -12 <(nm -u "${own[@]}" 2>/dev/null | awk '{print $NF}' | sort -u) <(strong_definitions "${above[@]}"))
  if [ -n "$bad" ]; then
    while IFS= read -r sym; do
      echo "$layer calls $(c++filt "$sym"), which a layer it may not use defines" >&2
      link_violations=$((link_violations + 1))
    done <<<"$bad"
  fi
done
if [ "$link_violations" -gt 0 ]; then
  echo "check-layers: $link_violations call(s) point the wrong way" >&2
  exit 1
fi
echo "check-layers: every call between config, loader, core and the C ABI points down"
