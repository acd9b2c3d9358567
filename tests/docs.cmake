# Documentation tests (label `docs`), included by tests/CMakeLists.txt:
#  - docs_snippets_build: every ```c and ```fortran block of README.md and
#    docs/**/*.md is compiled and linked against dmuon (tests/docs/
#    extract_snippets.awk says how blocks become programs);
#  - docs_run_<page>_<n>_np2: each block that is a whole program runs on 2 ranks;
#  - docs_doxygen: the C API reference builds with every public symbol
#    documented, and docs_doxygen_bites shows that an undocumented one fails;
#  - docs_fortran_table: every C function is in the C/Fortran table and in the
#    Fortran module; docs_c_api_index, docs_error_table and
#    docs_fortran_status_constants: the C API page, docs/errors.md and the
#    Fortran constants follow dmuon.h;
#  - docs_ns_coefficients: the Newton-Schulz page gives the coefficients of
#    src/core/newton_schulz.cpp, digit for digit;
#  - docs_links: the relative links of docs/index.md, docs/guide, docs/reference
#    and docs/troubleshooting.md resolve.
# The snippets are targets outside `all` (built only by the test), re-extracted
# whenever a Markdown file changes (they are configure dependencies).
find_program(DMUON_AWK NAMES awk gawk mawk REQUIRED)
set(docs_test_dir ${CMAKE_CURRENT_SOURCE_DIR}/docs)
set(snippet_dir ${CMAKE_CURRENT_BINARY_DIR}/docs_snippets)
set(staging ${CMAKE_CURRENT_BINARY_DIR}/docs_snippets_staging)
file(REMOVE_RECURSE ${staging})
file(MAKE_DIRECTORY ${staging} ${snippet_dir})

file(GLOB_RECURSE doc_pages CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/*.md)
list(PREPEND doc_pages ${PROJECT_SOURCE_DIR}/README.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${doc_pages} ${docs_test_dir}/extract_snippets.awk
             ${docs_test_dir}/wrap_body.c ${docs_test_dir}/wrap_toplevel.c ${docs_test_dir}/wrap_body.F90)

add_custom_target(docs_snippets)
set(doc_programs "")
set(doc_snippet_count 0)
foreach(page IN LISTS doc_pages)
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${page})
  string(REGEX REPLACE "\\.md$" "" slug "${rel}")
  string(REGEX REPLACE "[^A-Za-z0-9]+" "_" slug "${slug}")
  string(TOLOWER "${slug}" slug)
  execute_process(
    COMMAND ${DMUON_AWK} -v out=${staging} -v prefix=${slug} -v wrappers=${docs_test_dir} -v md=${page}
            -f ${docs_test_dir}/extract_snippets.awk ${page}
    OUTPUT_VARIABLE manifest ERROR_VARIABLE problems RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "extracting the code blocks of ${rel} failed:\n${problems}")
  endif()
  string(REGEX REPLACE "\n$" "" manifest "${manifest}")
  if(manifest STREQUAL "")
    continue()
  endif()
  string(REPLACE "\n" ";" entries "${manifest}")
  foreach(entry IN LISTS entries)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 name)
    list(GET fields 1 lang)
    list(GET fields 2 mode)
    list(GET fields 3 staged)
    # Copied only when changed, so that an unchanged snippet is not rebuilt.
    get_filename_component(file_name ${staged} NAME)
    set(source ${snippet_dir}/${file_name})
    configure_file(${staged} ${source} COPYONLY)
    if(lang STREQUAL "fortran" AND NOT DMuon_HAS_FORTRAN)
      message(STATUS "docs: ${name} (${rel}) is Fortran and Fortran is off: not built")
      continue()
    endif()
    set(target doc_${name})
    add_executable(${target} EXCLUDE_FROM_ALL ${source})
    if(lang STREQUAL "c")
      target_link_libraries(${target} PRIVATE DMuon::dmuon MPI::MPI_C m)
      # An excerpt of an example may include its header: #include "examples/c/mlp.h".
      target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
      # A renamed function or a changed signature must fail, not warn.
      target_compile_options(${target} PRIVATE -Wall -Werror=implicit-function-declaration
                             -Werror=incompatible-pointer-types -Werror=int-conversion -Werror=return-type)
    else()
      target_link_libraries(${target} PRIVATE DMuon::dmuon_fortran MPI::MPI_Fortran)
      set_target_properties(${target} PROPERTIES Fortran_PREPROCESS ON
                            Fortran_MODULE_DIRECTORY ${snippet_dir}/mod_${name})
    endif()
    add_dependencies(docs_snippets ${target})
    math(EXPR doc_snippet_count "${doc_snippet_count} + 1")
    if(mode STREQUAL "program")
      list(APPEND doc_programs ${target})
    endif()
  endforeach()
endforeach()
message(STATUS "docs: ${doc_snippet_count} code blocks in README.md and docs/ are compiled by docs_snippets_build")

# Compiling is the test: a snippet that no longer compiles fails here.
add_test(NAME docs_snippets_build
         COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target docs_snippets)
set_tests_properties(docs_snippets_build PROPERTIES LABELS docs FIXTURES_SETUP docs_snippets TIMEOUT 600
                     RUN_SERIAL TRUE)

foreach(target IN LISTS doc_programs)
  set(work ${snippet_dir}/run_${target})
  file(MAKE_DIRECTORY ${work})
  string(REGEX REPLACE "^doc_" "docs_run_" test_name ${target})
  dmuon_add_mpi_test(NAME ${test_name} COMMAND ${target} NPROCS 2 LABELS docs
                     PROPERTIES FIXTURES_REQUIRED docs_snippets WORKING_DIRECTORY ${work})
endforeach()

# ---------------------------------------------------------------- Doxygen
find_program(DMUON_DOXYGEN doxygen)
if(DMUON_DOXYGEN)
  add_test(NAME docs_doxygen COMMAND sh ${docs_test_dir}/check_doxygen.sh build ${DMUON_DOXYGEN} ${PROJECT_SOURCE_DIR}
                                     ${CMAKE_CURRENT_BINARY_DIR}/docs_doxygen)
  add_test(NAME docs_doxygen_bites COMMAND sh ${docs_test_dir}/check_doxygen.sh bites ${DMUON_DOXYGEN}
                                           ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/docs_doxygen_bites)
  set_tests_properties(docs_doxygen_bites PROPERTIES LABELS docs)
else()
  # Without doxygen the reference cannot be checked: say so (skipped, not passed).
  add_test(NAME docs_doxygen COMMAND sh -c "echo 'doxygen not found: install it (Debian: apt-get install doxygen)'; exit 77")
  set_tests_properties(docs_doxygen PROPERTIES SKIP_RETURN_CODE 77)
endif()
set_tests_properties(docs_doxygen PROPERTIES LABELS docs)

# ---------------------------------------------------------------- C/Fortran table
add_test(NAME docs_fortran_table
         COMMAND sh ${docs_test_dir}/check_fortran_table.sh ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.h
                 ${PROJECT_SOURCE_DIR}/interfaces/fortran/dmuon.F90 ${PROJECT_SOURCE_DIR}/docs/reference/fortran.md)
set_tests_properties(docs_fortran_table PROPERTIES LABELS docs)

# ---------------------------------------------------------------- lists that must follow the header
add_test(NAME docs_c_api_index COMMAND sh ${docs_test_dir}/check_listed.sh functions
                                       ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.h ${PROJECT_SOURCE_DIR}/docs/reference/c-api.md)
add_test(NAME docs_error_table COMMAND sh ${docs_test_dir}/check_listed.sh statuses
                                       ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.h ${PROJECT_SOURCE_DIR}/docs/errors.md)
add_test(NAME docs_ns_coefficients COMMAND sh ${docs_test_dir}/check_listed.sh polar-express
                                           ${PROJECT_SOURCE_DIR}/src/core/newton_schulz.cpp
                                           ${PROJECT_SOURCE_DIR}/docs/reference/newton-schulz.md)
set_tests_properties(docs_c_api_index docs_error_table docs_ns_coefficients PROPERTIES LABELS docs)
if(DMuon_HAS_FORTRAN)
  # docs/reference/fortran.md promises every status code as a Fortran constant
  # with its C value: the constants generated from dmuon.h for the module.
  add_test(NAME docs_fortran_status_constants
           COMMAND sh ${docs_test_dir}/check_listed.sh fortran-statuses ${PROJECT_SOURCE_DIR}/include/dmuon/dmuon.h
                   ${PROJECT_BINARY_DIR}/interfaces/fortran/generated/dmuon_constants.inc)
  set_tests_properties(docs_fortran_status_constants PROPERTIES LABELS docs)
endif()

# ---------------------------------------------------------------- links of the guide and reference
file(GLOB link_pages CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/docs/guide/*.md ${PROJECT_SOURCE_DIR}/docs/reference/*.md)
add_test(NAME docs_links COMMAND sh ${docs_test_dir}/check_links.sh ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/docs/index.md
                                    ${PROJECT_SOURCE_DIR}/docs/troubleshooting.md ${link_pages})
set_tests_properties(docs_links PROPERTIES LABELS docs)
