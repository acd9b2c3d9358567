#!/bin/sh
# check_links.sh ROOT PAGE...: every relative Markdown link [text](target) of
# each PAGE names a file or directory that exists, and a #anchor names a
# heading of the target page (GitHub's rule: lower case, punctuation dropped,
# spaces to hyphens). http(s) and mailto links are skipped; ROOT only shortens
# the messages.
set -u
root=$1
shift
status=0 n=0

# The anchors of a Markdown file's headings, one per line.
anchors() {
  awk '/^[ \t]*```/ { code = !code; next }
       !code && /^#+[ \t]/ {
         h = $0; sub(/^#+[ \t]+/, "", h); sub(/[ \t]+$/, "", h); h = tolower(h)
         gsub(/[][!"#$%&'"'"'()*+,.\/:;<=>?@\\^`{|}~]/, "", h); gsub(/ /, "-", h); print h
       }' "$1"
}

for page in "$@"; do
  dir=$(dirname "$page")
  # Links outside code: drop fenced blocks and inline code first.
  for link in $(awk '/^[ \t]*```/ { code = !code; next } !code' "$page" | sed 's/`[^`]*`//g' |
                grep -o '\](\([^) ]*\))' | sed 's/^](\(.*\))$/\1/'); do
    case $link in http://*|https://*|mailto:*|'') continue ;; esac
    n=$((n + 1))
    target=${link%%#*} anchor=
    case $link in *#*) anchor=${link#*#} ;; esac
    file=$dir/$target
    [ -z "$target" ] && file=$page
    if [ ! -e "$file" ]; then
      echo "${page#"$root"/}: broken link to $link"; status=1; continue
    fi
    if [ -n "$anchor" ] && [ -f "$file" ] && ! anchors "$file" | grep -qxF "$anchor"; then
      echo "${page#"$root"/}: no heading for #$anchor in ${file#"$root"/}"; status=1
    fi
  done
done
[ $status -eq 0 ] && echo "$n relative links, all resolve"
exit $status
