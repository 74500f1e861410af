# Generates a C file holding every schema/NNN_*.sql migration as a NUL-
# terminated byte array, in file-name order, so atolld carries its schema.
# Inputs: SCHEMA_DIR, OUTPUT.
file(GLOB sql_files "${SCHEMA_DIR}/[0-9][0-9][0-9]_*.sql")
list(SORT sql_files)
set(body "/* Generated from the schema folder by cmake/embed_sql.cmake; do not edit. */\n#include <stddef.h>\n")
set(names "")
set(i 0)
foreach(f ${sql_files})
  file(READ ${f} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  string(APPEND body "static const char m${i}[] = {${hex}0x00};\n")
  string(APPEND names "m${i},")
  math(EXPR i "${i}+1")
endforeach()
string(APPEND body "const char *const store_migrations[] = {${names}NULL};\n")
string(APPEND body "const int store_migration_count = ${i};\n")
file(WRITE ${OUTPUT} "${body}")
