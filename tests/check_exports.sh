#!/usr/bin/env bash
# The dynamic symbols libtokpos.so defines must be the public API and nothing
# else: C functions named tokpos_*, and C++ symbols in namespace tokpos outside
# its internal namespaces (detail, kernels, ...), with the typeinfo and vtables
# of the exported classes. Anything else (std:: instantiations, internal
# helpers, anonymous namespaces, other namespaces) is listed and fails.
#
# usage: check_exports.sh path/to/libtokpos.so   (NM and CXXFILT may name the tools)
set -euo pipefail

lib=${1:?usage: check_exports.sh LIBRARY}
nm=${NM:-nm}
cxxfilt=${CXXFILT:-c++filt}

# "value type name" per line; the name loses its @VERSION suffix (if any)
# before demangling, so c++filt sees a plain mangled name.
raw=$("$nm" -D --defined-only "$lib") || { echo "check_exports: $nm -D failed on $lib"; exit 1; }
listing=$(printf '%s\n' "$raw" | awk 'NF >= 3 { n = $3; sub(/@.*/, "", n); print $2 " " n }' | "$cxxfilt")
total=$(printf '%s\n' "$listing" | grep -c . || true)

bad=()
while IFS= read -r line; do
  [[ -z $line ]] && continue
  type=${line%% *}
  name=${line#* }
  # Housekeeping: a version node (absolute symbol) and the linker's own markers.
  if [[ $type == A ]] || [[ $name =~ ^(_init|_fini|_edata|_end|__bss_start)$ ]]; then
    continue
  fi
  # The C API: plain (unmangled) names tokpos_*.
  if [[ $name =~ ^tokpos_[A-Za-z0-9_]+$ ]]; then
    continue
  fi
  # C++: the entity itself, or the typeinfo/vtable/thunk of one.
  entity=$name
  for prefix in "typeinfo name for " "typeinfo for " "construction vtable for " "vtable for " "VTT for " \
                "non-virtual thunk to " "virtual thunk to "; do
    if [[ $entity == "$prefix"* ]]; then
      entity=${entity#"$prefix"}
      break
    fi
  done
  if [[ $entity == tokpos::* ]] &&
     [[ $entity != *"::detail::"* ]] && [[ $entity != *"::internal::"* ]] &&
     [[ $entity != *"tokpos::kernels::"* ]] && [[ $entity != *"(anonymous namespace)"* ]]; then
    continue
  fi
  bad+=("$name")
done <<< "$listing"

status=0
if ((${#bad[@]} > 0)); then
  echo "check_exports: $lib exports ${#bad[@]} of $total symbols outside the public API:"
  printf '  %s\n' "${bad[@]}"
  status=1
fi

# The public API must be there, so an empty or broken listing cannot pass.
# Each entry is a whole symbol name, or the start of one ("f(" for any overload).
names=$(printf '%s\n' "$listing" | cut -d' ' -f2-)
for want in "tokpos_compose_forward" "tokpos::EmbeddingComposer::forward(" "typeinfo for tokpos::Error"; do
  if ! printf '%s\n' "$names" | awk -v w="$want" '$0 == w || (w ~ /\($/ && index($0, w) == 1) { found = 1 } END { exit !found }'; then
    echo "check_exports: $lib does not export $want"
    status=1
  fi
done

if ((status == 0)); then
  echo "check_exports: $total symbols, all public API"
fi
exit $status
