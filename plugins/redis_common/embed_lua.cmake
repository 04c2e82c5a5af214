# Embeds the Redis Lua scripts of lua/ in a generated C++ header, run at build time by
# add_custom_command (CMakeLists.txt here):
#   cmake -DLUA_DIR=<dir> -DSCRIPTS="acquire;release;..." -DOUTPUT=<header> -P embed_lua.cmake
# Each script lua/<name>.lua becomes `inline constexpr char <name>_lua[]` in namespace
# dlock::redis_common::lua, holding the file's text with every include directive expanded: a line
# that is exactly
#   --!include "includes/<file>.lua"
# is replaced by the text of lua/includes/<file>.lua without its leading comment lines, its header
# (whole lines; nothing else changes). Includes do not include others. The build fails on a
# malformed directive, a missing include, or a text that holds the raw string's closing delimiter.
# Nothing is read at run time.
cmake_minimum_required(VERSION 3.18)

foreach(var LUA_DIR SCRIPTS OUTPUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_lua.cmake: -D${var}=... is required")
  endif()
endforeach()

# Lua has no `)DLOCKLUA"`: it could only appear inside a string or a comment, which the check below
# refuses rather than splitting the literal.
set(delimiter "DLOCKLUA")

# expand(<name> <out-var>): the script's text with its include directives replaced.
function(expand name out_var)
  set(path "${LUA_DIR}/${name}.lua")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "embed_lua.cmake: no script ${path}")
  endif()
  file(READ "${path}" text)
  string(REGEX MATCHALL "--!include[^\n]*" directives "${text}")
  set(seen "")
  foreach(directive IN LISTS directives)
    if(directive IN_LIST seen)
      message(FATAL_ERROR "embed_lua.cmake: ${path}: `${directive}` appears twice")
    endif()
    list(APPEND seen "${directive}")
    if(NOT directive MATCHES "^--!include \"(includes/[A-Za-z0-9_]+\\.lua)\"$")
      message(FATAL_ERROR "embed_lua.cmake: ${path}: malformed directive `${directive}` "
                          "(expected --!include \"includes/<file>.lua\" on a line of its own)")
    endif()
    set(include_path "${LUA_DIR}/${CMAKE_MATCH_1}")
    if(NOT EXISTS "${include_path}")
      message(FATAL_ERROR "embed_lua.cmake: ${path}: no include ${include_path}")
    endif()
    file(READ "${include_path}" included)
    if(included MATCHES "--!include")
      message(FATAL_ERROR "embed_lua.cmake: ${include_path}: an include may not include another")
    endif()
    if(NOT included MATCHES "\n$")
      message(FATAL_ERROR "embed_lua.cmake: ${include_path} does not end with a newline")
    endif()
    # The include's header (its leading comment lines) documents the source; each script that
    # includes it would otherwise send it to Redis again.
    string(REGEX REPLACE "^(--[^\n]*\n)+" "" included "${included}")
    # The directive must be a whole line: at the start of the text or after a newline, and followed by one.
    string(FIND "${text}" "${directive}\n" at)
    if(at LESS 0)
      message(FATAL_ERROR "embed_lua.cmake: ${path}: `${directive}` is not followed by a newline")
    endif()
    if(at GREATER 0)
      math(EXPR before "${at} - 1")
      string(SUBSTRING "${text}" ${before} 1 previous)
      if(NOT previous STREQUAL "\n")
        message(FATAL_ERROR "embed_lua.cmake: ${path}: `${directive}` does not start its line")
      endif()
    endif()
    string(REPLACE "${directive}\n" "${included}" text "${text}")
  endforeach()
  if(text MATCHES "\\)${delimiter}\"")
    message(FATAL_ERROR "embed_lua.cmake: ${path} (expanded) holds `)${delimiter}\"`, the raw string's closing delimiter")
  endif()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

set(header "// Generated at build time by plugins/redis_common/embed_lua.cmake from plugins/redis_common/lua/: do not edit.\n")
string(APPEND header "// Each constant is one whole script, its include directives expanded (the .lua file's header says its contract).\n")
string(APPEND header "#pragma once\n\nnamespace dlock::redis_common::lua {\n")
foreach(name IN LISTS SCRIPTS)
  expand(${name} text)
  string(APPEND header "\ninline constexpr char ${name}_lua[] = R\"${delimiter}(${text})${delimiter}\";\n")
endforeach()
string(APPEND header "\n}  // namespace dlock::redis_common::lua\n")

file(WRITE "${OUTPUT}" "${header}")
