// Records the waits of Guava's real RateLimiter for a script (see ../../guava_vectors.rs for the
// format), to check sluicegate's smooth limiters against. It lives in Guava's package to reach
// the package-private constructors that take a stopwatch. With Debian's libguava-java (31.1):
//
//   javac -cp /usr/share/java/guava.jar -d /tmp/oracle Oracle.java
//   (echo "# Recorded from Guava 31.1's RateLimiter with guava-oracle/Oracle.java; do not edit by hand."
//    echo "# Random part: python3 gen.py 2026 20. Then hand-written extremes."
//    python3 gen.py 2026 20; cat extremes.txt) |
//     java -cp /usr/share/java/guava.jar:/tmp/oracle com.google.common.util.concurrent.Oracle \
//     > ../guava_traces.txt
//
// Scripts with expected answers (` = WAIT`) can be fed as they are: the answers are recomputed,
// so `diff` against the input checks hand-written vectors (../guava_rate_limiter_test.txt, the
// DESIGN_SECTION_9 script in ../../guava_vectors.rs) against Guava.
package com.google.common.util.concurrent;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.concurrent.TimeUnit;

/** Replays a script of limiter commands on Guava's real RateLimiter with a fake stopwatch. */
public class Oracle {
  static final class Fake extends RateLimiter.SleepingStopwatch {
    long micros = 0;
    long lastSleep = -1;
    @Override protected long readMicros() { return micros; }
    @Override protected void sleepMicrosUninterruptibly(long m) { lastSleep = m; micros += m; }
  }

  public static void main(String[] args) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    Fake clock = null;
    RateLimiter limiter = null;
    String line;
    while ((line = in.readLine()) != null) {
      // Anything after " = " (an expected answer) is ignored and recomputed.
      String[] w = line.split(" = ")[0].trim().split("\\s+");
      if (line.trim().isEmpty() || w[0].startsWith("#")) { System.out.println(line); continue; }
      switch (w[0]) {
        case "bursty": {
          clock = new Fake();
          SmoothRateLimiter.SmoothBursty b = new SmoothRateLimiter.SmoothBursty(clock, Double.parseDouble(w[2]));
          b.setRate(Double.parseDouble(w[1]));
          limiter = b;
          System.out.println(line);
          break;
        }
        case "warmup": {
          clock = new Fake();
          limiter = RateLimiter.create(Double.parseDouble(w[1]), Long.parseLong(w[2]),
              TimeUnit.MICROSECONDS, Double.parseDouble(w[3]), clock);
          System.out.println(line);
          break;
        }
        case "sleep":
          clock.micros += Long.parseLong(w[1]);
          System.out.println(line);
          break;
        case "rate":
          limiter.setRate(Double.parseDouble(w[1]));
          System.out.println(line);
          break;
        case "acquire": {
          clock.lastSleep = -1;
          limiter.acquire(Integer.parseInt(w[1]));
          System.out.println(w[0] + " " + w[1] + " = " + clock.lastSleep);
          break;
        }
        case "check": {
          clock.lastSleep = -1;
          boolean ok = limiter.tryAcquire(Integer.parseInt(w[1]));
          System.out.println(w[0] + " " + w[1] + " = " + (ok ? Long.toString(clock.lastSleep) : "deny"));
          break;
        }
        case "try": {
          clock.lastSleep = -1;
          boolean ok = limiter.tryAcquire(Integer.parseInt(w[1]), Long.parseLong(w[2]), TimeUnit.MICROSECONDS);
          System.out.println(w[0] + " " + w[1] + " " + w[2] + " = " + (ok ? Long.toString(clock.lastSleep) : "deny"));
          break;
        }
        default: throw new IllegalArgumentException(line);
      }
    }
  }
}
