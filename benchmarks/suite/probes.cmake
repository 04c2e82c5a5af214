# probes.cmake — the backend-specific half of the comparison suite (probes.hpp): floors and
# calibration through each plugin's own client library, server command counts, Redlock's S7 and the
# peers (S8). Included by benchmarks/suite/CMakeLists.txt; defines
#   dlock_bench_probes   static library, one probes_<family>.cpp per backend family
#   dlock-probes-check   starts the lab and prints every probe's results (a probe's own test)
# Each family whose client library is not built here compiles to a probe that reports "not built".

set(dlock_probes_dir ${CMAKE_CURRENT_LIST_DIR})
get_filename_component(dlock_repo_dir ${CMAKE_CURRENT_LIST_DIR}/../.. ABSOLUTE)
set(dlock_peers_dir ${dlock_repo_dir}/benchmarks/peers)

add_library(dlock_bench_probes STATIC
  ${dlock_probes_dir}/probes_common.cpp
  ${dlock_probes_dir}/probes_file.cpp
  ${dlock_probes_dir}/probes_redis.cpp
  ${dlock_probes_dir}/probes_zookeeper.cpp
  ${dlock_probes_dir}/probes_etcd.cpp
  ${dlock_probes_dir}/probes_sql.cpp
  ${dlock_probes_dir}/probes_python.cpp)
target_include_directories(dlock_bench_probes PUBLIC ${dlock_probes_dir})
target_link_libraries(dlock_bench_probes PUBLIC dlock::cpp dlock::lab PRIVATE fmt::fmt nlohmann_json::nlohmann_json Threads::Threads)
target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_BENCH_PEERS_DIR="${dlock_peers_dir}")
# dlock (Python) loads the libdlock of this build.
target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_BENCH_LIBDLOCK="$<TARGET_FILE:dlock>")

# redis, redlock: dlock's own hiredis connection code.
if(TARGET dlock_redis_common)
  target_link_libraries(dlock_bench_probes PRIVATE dlock_redis_common)
  target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_PROBES_REDIS=1)
endif()

# etcd: the plugin's connection layer (same gRPC channel settings, proto subset).
if(TARGET dlock_etcd_client)
  target_link_libraries(dlock_bench_probes PRIVATE dlock_etcd_client)
  target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_PROBES_ETCD=1)
endif()

# zookeeper: the multi-threaded ZooKeeper C client the plugin uses (found by plugins/zookeeper).
if(DLOCK_ZOOKEEPER_MT_LIBRARY AND DLOCK_ZOOKEEPER_MT_INCLUDE_DIR)
  target_include_directories(dlock_bench_probes SYSTEM PRIVATE ${DLOCK_ZOOKEEPER_MT_INCLUDE_DIR})
  target_link_libraries(dlock_bench_probes PRIVATE ${DLOCK_ZOOKEEPER_MT_LIBRARY})
  target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_PROBES_ZOOKEEPER=1)
endif()

# sql: the plugin's PostgreSQL client (libpqxx connection, settings, prepared statements), linked.
if(TARGET dlock_plugin_sql)
  find_package(PkgConfig REQUIRED)
  target_link_libraries(dlock_bench_probes PRIVATE dlock_sql_postgres)  # plugins/sql/pg_client.cpp and sql_shared.cpp
  target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_PROBES_SQL=1)
  # mysql_lease, mysql_named: the plugin's MariaDB Connector/C client code compiled in.
  pkg_check_modules(DLOCK_PROBES_MARIADB REQUIRED IMPORTED_TARGET libmariadb)
  target_sources(dlock_bench_probes PRIVATE ${dlock_repo_dir}/plugins/sql/mysql_client.cpp ${dlock_probes_dir}/probes_mysql.cpp)
  target_link_libraries(dlock_bench_probes PRIVATE PkgConfig::DLOCK_PROBES_MARIADB)
endif()

# The plugins the probes load through dlock::client, and `dlock run` (etcdctl lock's counterpart).
foreach(backend file redis redlock zookeeper etcd sql)
  if(TARGET dlock_plugin_${backend})
    add_dependencies(dlock_bench_probes dlock_plugin_${backend})
  endif()
endforeach()
if(TARGET dlock_cli)
  add_dependencies(dlock_bench_probes dlock_cli)
  target_compile_definitions(dlock_bench_probes PRIVATE DLOCK_CLI="$<TARGET_FILE:dlock_cli>")
endif()

add_executable(dlock-probes-check ${dlock_probes_dir}/probes_check.cpp)
target_link_libraries(dlock-probes-check PRIVATE dlock_bench_probes fmt::fmt)
