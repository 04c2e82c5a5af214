# etcd_bench calibrates its floor through the plugin's own connection layer (dlock_etcd_client: the
# same gRPC channel settings and call path the plugin uses), and times `dlock run` per invocation.
target_link_libraries(etcd_bench PRIVATE dlock_etcd_client nlohmann_json::nlohmann_json fmt::fmt)
if(TARGET dlock_cli)
  add_dependencies(etcd_bench dlock_cli)
  target_compile_definitions(etcd_bench PRIVATE DLOCK_CLI="$<TARGET_FILE:dlock_cli>")
endif()
