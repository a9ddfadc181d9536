// rate-limiter-flexible (RateLimiterRedis over ioredis) on the same Redis and the same traffic
// as examples/redis_bench.rs: node rlflex.js PORT SECONDS TASKS KEYS
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');

const [port, seconds, tasks, keys] = process.argv.slice(2).map(Number);
const client = new Redis({ port, host: '127.0.0.1', enableOfflineQueue: false });
// 100 points per 1 s per key, the same budget as the Rust run.
const limiter = new RateLimiterRedis({
  storeClient: client, keyPrefix: 'bench:rlflex', points: 100, duration: 1,
});

async function main() {
  await new Promise((resolve) => client.once('ready', resolve));
  let done = false;
  let total = 0;
  let allowed = 0;
  const started = process.hrtime.bigint();
  const worker = async (task) => {
    let i = BigInt(task);
    while (!done) {
      const key = `user-${i % BigInt(keys)}`;
      i = ((i * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n)) >> 1n;
      try {
        await limiter.consume(key);
        allowed += 1;
      } catch (rejection) {
        if (rejection instanceof Error) throw rejection;
      }
      total += 1;
    }
  };
  const workers = Array.from({ length: tasks }, (_, t) => worker(t));
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  done = true;
  await Promise.all(workers);
  const secs = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(JSON.stringify({
    impl: 'rate-limiter-flexible', algorithm: 'fixed-window', tasks, decisions: total, allowed,
    seconds: Number(secs.toFixed(3)), per_second: Math.round(total / secs),
  }));
  client.disconnect();
}

main().catch((err) => { console.error(err); process.exit(1); });
