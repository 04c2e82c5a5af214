# redis_bench calibrates its floor through dlock's own hiredis connection code and scripts.
target_link_libraries(redis_bench PRIVATE dlock_redis_common nlohmann_json::nlohmann_json fmt::fmt)
