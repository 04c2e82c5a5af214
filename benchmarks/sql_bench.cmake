# Included by benchmarks/CMakeLists.txt after the sql_bench target exists. The floor is timed through
# the plugin's own session code (plugins/sql/sql_common.cpp: libpqxx connection, connection settings,
# prepared statements) and SQL text (sql_statements.hpp), compiled into the benchmark.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SQL_BENCH_PQXX REQUIRED IMPORTED_TARGET libpqxx)
pkg_check_modules(SQL_BENCH_LIBPQ REQUIRED IMPORTED_TARGET libpq)
target_sources(sql_bench PRIVATE ${PROJECT_SOURCE_DIR}/plugins/sql/sql_common.cpp)
target_include_directories(sql_bench PRIVATE ${PROJECT_SOURCE_DIR}/plugins/sql)
target_link_libraries(sql_bench PRIVATE dlock::plugin_api PkgConfig::SQL_BENCH_PQXX PkgConfig::SQL_BENCH_LIBPQ fmt::fmt Threads::Threads)
