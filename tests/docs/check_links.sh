#!/bin/sh
# check_links.sh ROOT PAGE...: every relative Markdown link [text](target) of
# each PAGE names a file or directory that exists (the #anchor is not checked;
# http(s) and mailto links are skipped). ROOT is only used to shorten messages.
set -u
root=$1
shift
status=0 n=0
for page in "$@"; do
  dir=$(dirname "$page")
  # Links outside code: drop fenced blocks and inline code first.
  for target in $(awk '/^[ \t]*```/ { code = !code; next } !code' "$page" | sed 's/`[^`]*`//g' |
                  grep -o '\](\([^)#]*\)[^)]*)' | sed 's/^](\([^)#]*\).*/\1/'); do
    case $target in http://*|https://*|mailto:*|'') continue ;; esac
    n=$((n + 1))
    [ -e "$dir/$target" ] || { echo "${page#"$root"/}: broken link to $target"; status=1; }
  done
done
[ $status -eq 0 ] && echo "$n relative links, all resolve"
exit $status
