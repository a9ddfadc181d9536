-- Registers the entry points as Redis Functions (Redis 7+), after every other file (see
-- src/scripts.rs). FUNCTION_PREFIX, set ahead of the library, holds a hash of its code, so a
-- server can hold the libraries of several versions of this crate at once.
-- Redis 7, which runs Functions, takes SET with NX and GET together (see key_misses).
key_misses = 0
redis.register_function(FUNCTION_PREFIX .. "decide", decide_all)
redis.register_function(FUNCTION_PREFIX .. "lease", lease)
redis.register_function(FUNCTION_PREFIX .. "one_gcra", one_gcra)
redis.register_function(FUNCTION_PREFIX .. "one_fixed_window", one_fixed_window)
redis.register_function(FUNCTION_PREFIX .. "batch", batch)
redis.register_function(FUNCTION_PREFIX .. "config", config)
