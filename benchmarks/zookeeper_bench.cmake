# Extra links of zookeeper_bench (included by benchmarks/CMakeLists.txt after the target exists):
# the ZooKeeper C client, through which the floor is calibrated — the same library the plugin uses.
find_library(DLOCK_BENCH_ZOOKEEPER_MT_LIBRARY NAMES zookeeper_mt REQUIRED)
find_path(DLOCK_BENCH_ZOOKEEPER_MT_INCLUDE_DIR zookeeper/zookeeper.h REQUIRED)
target_include_directories(zookeeper_bench SYSTEM PRIVATE ${DLOCK_BENCH_ZOOKEEPER_MT_INCLUDE_DIR})
target_link_libraries(zookeeper_bench PRIVATE ${DLOCK_BENCH_ZOOKEEPER_MT_LIBRARY} Threads::Threads)
