#!/bin/sh
# check_fortran_table.sh DMUON_H DMUON_F90 TABLE_MD
# The C/Fortran table of docs/reference/fortran.md cannot drift from the code:
#  1. every function of dmuon.h has a row whose C cell names it;
#  2. every public procedure of the Fortran module is named in a Fortran cell;
#  3. every procedure named in a Fortran cell is a public procedure of the module;
#  4. every C function is a public procedure of the module of the same name, or
#     its row says which procedure calls it: "(called by `dmuon_...(`)".
# A row is a Markdown table line whose first cell starts with `dmuon_...(.
set -u
header=$1 module=$2 table=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
status=0

sed -n 's/^[a-z].*[ *]\(dmuon_[a-z0-9_]*\)(.*/\1/p' "$header" | sort -u > "$tmp/c_functions"
[ -s "$tmp/c_functions" ] || { echo "no function found in $header"; exit 1; }

# Public names of the module (public :: statements, with continuation lines).
awk 'BEGIN { IGNORECASE = 1 }
     /^[ \t]*public[ \t]*::/ { on = 1; sub(/.*::/, "") }
     on { line = $0; sub(/!.*/, "", line); more = line ~ /&[ \t]*$/; gsub(/[&,]/, " ", line)
          n = split(line, w, /[ \t]+/); for (i = 1; i <= n; ++i) if (w[i] != "") print tolower(w[i])
          on = more }' "$module" | sort -u > "$tmp/public"
# ... that are procedures or generic interfaces.
grep -io '^[ \t]*\(subroutine\|function\|interface\)[ \t][ \t]*dmuon_[a-z0-9_]*' "$module" |
  awk '{ print tolower($2) }' | sort -u > "$tmp/defined"
grep -io '^[ \t]*[a-z(),=0-9 ]*function[ \t][ \t]*dmuon_[a-z0-9_]*' "$module" |
  sed 's/.*function[ \t]*//I' | tr 'A-Z' 'a-z' | sort -u >> "$tmp/defined"
sort -u "$tmp/defined" -o "$tmp/defined"
comm -12 "$tmp/public" "$tmp/defined" > "$tmp/f_procedures"
[ -s "$tmp/f_procedures" ] || { echo "no public procedure found in $module"; exit 1; }

# Rows of the table: C cell and Fortran cell.
grep '^|[ \t]*`dmuon_[a-z0-9_]*(' "$table" > "$tmp/rows" || { echo "no table rows in $table"; exit 1; }
cut -d'|' -f2 "$tmp/rows" | grep -o 'dmuon_[a-z0-9_]*(' | tr -d '(' | sort -u > "$tmp/c_in_table"
cut -d'|' -f3 "$tmp/rows" | grep -o 'dmuon_[a-z0-9_]*(' | tr -d '(' | sort -u > "$tmp/f_in_table"

for f in $(comm -23 "$tmp/c_functions" "$tmp/c_in_table"); do
  echo "$table: no row for the C function $f (declared in dmuon.h)"; status=1
done
for f in $(comm -23 "$tmp/c_in_table" "$tmp/c_functions"); do
  echo "$table: the C function $f is not declared in dmuon.h"; status=1
done
for f in $(comm -23 "$tmp/f_procedures" "$tmp/f_in_table"); do
  echo "$table: the public Fortran procedure $f is in no row"; status=1
done
for f in $(comm -23 "$tmp/f_in_table" "$tmp/f_procedures"); do
  echo "$table: $f is not a public procedure of the Fortran module"; status=1
done
for f in $(comm -23 "$tmp/c_functions" "$tmp/f_procedures"); do
  grep "^|[ \t]*\`$f(" "$tmp/rows" | cut -d'|' -f3 | grep -q '(called by `dmuon_' && continue
  echo "the C function $f has no Fortran procedure of that name (and its row names no caller)"; status=1
done
[ $status -eq 0 ] && echo "$(wc -l < "$tmp/c_functions") C functions and $(wc -l < "$tmp/f_procedures") Fortran procedures, all in the table"
exit $status
