#!/usr/bin/env bash
# A library crate's README is also its crate documentation
# (`#![doc = include_str!("../README.md")]`), so its links must work on
# docs.rs, on crates.io and in the repository alike: each item link is a
# reference link to docs.rs. rustdoc does not check such URLs, so this does,
# against the docs `cargo doc --workspace --no-deps` built in target/doc:
#   - every https://docs.rs/<crate>/latest/<path>[#<id>] names a page that
#     exists (and an element with that id);
#   - no rustdoc-only shortcut link ([`Item`] without a definition) is
#     left, which would show as literal brackets outside docs.rs.
#
#   ./scripts/check-readme-links.sh        # after cargo doc
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0
bad() { echo "  $1: $2" >&2; fail=1; }

readmes=()
for lib in $(git ls-files '*src/lib.rs'); do
    if grep -q '^#!\[doc = include_str!("../README.md")\]' "$lib"; then
        readmes+=("$(dirname "$(dirname "$lib")")/README.md")
    fi
done

for readme in "${readmes[@]}"; do
    while read -r url; do
        crate=${url#https://docs.rs/}
        crate=${crate%%/*}
        path=${url#https://docs.rs/"$crate"/latest/}
        file=${path%%#*}
        [[ ${file%%/*} == "${crate//-/_}" ]] || bad "$readme" "$url: crate name and path disagree"
        if [[ ! -f target/doc/$file ]]; then
            bad "$readme" "$url: no page target/doc/$file"
        elif [[ $path == *#* ]] && ! grep -q "id=\"${path#*#}\"" "target/doc/$file"; then
            bad "$readme" "$url: no #${path#*#} on target/doc/$file"
        fi
    done < <(grep -o 'https://docs\.rs/[A-Za-z0-9_-]*/latest/[^ )>]*' "$readme" | sort -u)

    # Shortcut links outside code blocks, minus those with a definition.
    while read -r label; do
        grep -qF -- "$label: " "$readme" || bad "$readme" "$label has no link definition"
    done < <(awk '/^```/ { code = !code; next } !code' "$readme" |
        grep -oP '\[`[^`\]]+`\](?![(\[:])' | sort -u)
done

if [[ $fail != 0 ]]; then
    echo "README links: broken (see above)" >&2
    exit 1
fi
echo "README links: ${#readmes[@]} READMEs, every docs.rs link resolves"
