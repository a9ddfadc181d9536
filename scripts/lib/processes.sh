# Sourced by the proxy's benchmark scripts (through bench-setup.sh) and scripts/build-pgo.sh: a work
# directory and the processes to stop on exit, free ports, waiting for a listener, and nginx
# configurations.

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_port PORT [SECONDS, default 10] [NAME]: returns once something accepts on PORT; else
# says that NAME (by default "nothing") does not listen there, and exits.
wait_port() {
  for _ in $(seq $(( ${2:-10} * 20 ))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "${3:-nothing} does not listen on $1" >&2; exit 1
}

# nginx_conf NAME MAIN HTTP-BODY: writes $work/NAME/nginx.conf, an nginx as this user in the
# foreground with the top-level directives MAIN (`worker_processes auto;`) and HTTP-BODY in
# its `http` block, and prints its path.
nginx_conf() {
  local dir="$work/$1"; mkdir -p "$dir"
  cat > "$dir/nginx.conf" <<CONF
daemon off; $2
pid $dir/nginx.pid;
error_log $dir/error.log error;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi;
  uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  $3
}
CONF
  echo "$dir/nginx.conf"
}

# nginx_start NAME PORT HTTP-BODY: an nginx with a worker per CPU (nginx_conf), started and
# waited for on PORT; its master's pid in nginx_master_NAME (a `-` in NAME read as `_`).
nginx_start() {
  local conf; conf=$(nginx_conf "$1" "worker_processes auto;" "$3")
  /usr/sbin/nginx -p "$work/$1" -c "$conf" -e stderr 2>>"$work/$1/stderr.log" &
  pids+=($!)
  printf -v "nginx_master_${1//-/_}" "%s" "$!"
  wait_port "$2"
}
