-- luacheck's configuration (Debian `lua-check`) for dlock's Redis scripts, plugins/redis_common/lua;
-- scripts/test.sh runs `luacheck plugins/redis_common/lua` from the repository's root.
-- Scripts run in Redis's Lua 5.1 with the globals Redis 5-7 provide besides the standard library.
stds.redis = {
  read_globals = {
    "redis",  -- redis.call, pcall, error_reply, status_reply, sha1hex, log, acl_check_cmd (7.0), ...
    "KEYS", "ARGV",  -- a script's keys and arguments
    "cjson", "cmsgpack", "struct", "bit",  -- the libraries Redis loads
  },
}
std = "lua51+redis"
-- Not in Redis's sandbox (Redis 7 has os.clock alone; a script uses nothing that 5.0 lacks).
not_globals = {"io", "os", "package", "require", "module", "dofile", "loadfile"}
max_line_length = 150

-- A script's text is its file with every `--!include "includes/<file>.lua"` line replaced by that
-- file (plugins/redis_common/embed_lua.cmake). Checked one file at a time, a script calls the
-- functions of its includes as globals, and an include defines functions it does not call itself.
local include_functions = {
  grant = {"corrupt_fence", "next_token", "grant"},
  queue = {"server_time", "drop_lapsed", "wake_member", "wake_standby", "wake_next", "queue_member", "enqueue",
           "soonest_lapse_in", "first_lapses_in", "last_lapse_in", "nudge_member", "wake_first", "wake_sleeping_head"},
  shared = {"lock_holder", "writer_ahead", "wake_reader_at_head", "drop_expired_members", "expire_with_members"},
  semaphore = {"stored_limit", "live_members", "permits_free"},
  member = {"find_member"},
}
local all_functions = {}
for include, names in pairs(include_functions) do
  local unused_here = {}
  for _, name in ipairs(names) do
    table.insert(all_functions, name)
    table.insert(unused_here, "211/" .. name)  -- an include's function unused in the include itself
  end
  files["plugins/redis_common/lua/includes/" .. include .. ".lua"] = {ignore = unused_here}
end
-- Every function of the includes may be called; one a script did not include fails at once in the
-- tests ("attempt to call a nil value").
read_globals = all_functions
