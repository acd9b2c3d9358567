# Extracts the ```c and ```fortran blocks of one Markdown file into compilable
# sources, one file per block, and prints one manifest line per block:
#     <name>|<lang>|<mode>|<source file>|<markdown line>
# Variables (awk -v): out (directory for the sources), prefix (name prefix),
# wrappers (directory holding wrap_body.c, wrap_toplevel.c, wrap_body.F90),
# md (the file's path as the compiler should report it).
#
# The mode of a block is given by an HTML comment on the line just before its
# fence, or guessed:
#     <!-- snippet: program -->    a whole program: compiled, linked and run on 2 ranks;
#                                  "program NAME" also names it (the test is then
#                                  docs_run_<page>_NAME, stable when blocks move)
#     <!-- snippet: fragment -->   statements: compiled and linked inside a function
#                                  (C) or a BLOCK (Fortran) of tests/docs/wrap_body.*
#     <!-- snippet: toplevel -->   C declarations and functions at file scope
#                                  (tests/docs/wrap_toplevel.c)
# Unmarked, a C block with "int main(" or a Fortran block that starts with
# "program" is a program, anything else a fragment. Every block is built:
# there is no way to exempt one.
# Each source carries #line directives, so a compiler error names the
# Markdown file and line.

function flush_block(   file, ext, wrapper, line, mode, name, label) {
  mode = marker
  label = ""
  if (mode ~ /^program[ \t]+[A-Za-z0-9_]+$/) {
    label = mode
    sub(/^program[ \t]+/, "", label)
    mode = "program"
  }
  if (mode == "") {
    if (lang == "c") mode = (body ~ /int[ \t]+main[ \t]*\(/) ? "program" : "fragment"
    else mode = (body ~ /^[ \t\n]*[Pp][Rr][Oo][Gg][Rr][Aa][Mm][ \t]/) ? "program" : "fragment"
  }
  if (mode == "fragment") mode = "body"
  if (mode != "program" && mode != "body" && mode != "toplevel") {
    printf "%s:%d: unknown snippet mode '%s'\n", md, start, marker > "/dev/stderr"
    failed = 1
    return
  }
  if (lang == "fortran" && mode == "toplevel") {
    printf "%s:%d: 'toplevel' is for C blocks only\n", md, start, marker > "/dev/stderr"
    failed = 1
    return
  }
  ++count
  name = prefix "_" (label != "" ? label : count)
  if (name in used) {
    printf "%s:%d: a second snippet named '%s'\n", md, start, label > "/dev/stderr"
    failed = 1
    return
  }
  used[name] = 1
  ext = (lang == "c") ? ".c" : ".F90"
  file = out "/" name ext
  printf "" > file
  if (mode == "program") {
    printf "#line %d \"%s\"\n%s", start + 1, md, body > file
  } else {
    wrapper = wrappers "/wrap_" mode ext
    while ((getline line < wrapper) > 0) {
      if (line ~ /@SNIPPET@/) printf "#line %d \"%s\"\n%s", start + 1, md, body > file
      else print line > file
    }
    close(wrapper)
  }
  close(file)
  print name "|" lang "|" mode "|" file "|" start
}

BEGIN { inside = 0; count = 0; marker = ""; previous = ""; failed = 0 }

{
  if (!inside) {
    if ($0 ~ /^[ \t]*```[ \t]*(c|fortran|f90|F90)[ \t]*$/) {
      inside = 1
      lang = $0
      sub(/^[ \t]*```[ \t]*/, "", lang)
      sub(/[ \t]*$/, "", lang)
      lang = (lang == "c") ? "c" : "fortran"
      start = NR
      body = ""
      marker = ""
      if (previous ~ /<!--[ \t]*snippet:/) {
        marker = previous
        sub(/.*<!--[ \t]*snippet:[ \t]*/, "", marker)
        sub(/[ \t]*-->.*/, "", marker)
      }
    }
    previous = $0
    next
  }
  if ($0 ~ /^[ \t]*```[ \t]*$/) {
    inside = 0
    flush_block()
    previous = $0
    next
  }
  body = body $0 "\n"
}

END {
  if (inside) {
    printf "%s:%d: code block not closed\n", md, start > "/dev/stderr"
    failed = 1
  }
  exit failed
}
