// Peer for benchmarks/zookeeper_bench: Apache Curator's InterProcessMutex (Debian
// libcurator-recipes-java). The benchmark compiles this file with javac into a temporary directory
// against the jars in /usr/share/java and runs it on the same ZooKeeper server as dlock.
//
//   java -cp DIR:JARS CuratorBench CONNECT CYCLES WARMUP
//
// Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones (JIT warm-up),
// on one session, with Curator's defaults (it waits on a watch of its predecessor; nothing to tune).
// Prints one line: RESULT p50_us=.. p99_us=.. p999_us=.. cycles=.. version=..
import java.util.Arrays;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorBench {
    private static double percentile(long[] sortedNs, double fraction) {
        return sortedNs[Math.min(sortedNs.length - 1, (int) (fraction * sortedNs.length))] / 1000.0;
    }

    public static void main(String[] args) throws Exception {
        final String connect = args[0];
        final int cycles = Integer.parseInt(args[1]);
        final int warmup = Integer.parseInt(args[2]);
        final long[] samples = new long[cycles];
        try (CuratorFramework client = CuratorFrameworkFactory.newClient(connect, 10_000, 10_000, new RetryOneTime(100))) {
            client.start();
            client.blockUntilConnected();
            final InterProcessMutex mutex = new InterProcessMutex(client, "/bench-peers/curator");
            for (int i = 0; i < warmup + cycles; i++) {
                final long start = System.nanoTime();
                mutex.acquire();
                mutex.release();
                final long elapsed = System.nanoTime() - start;
                if (i >= warmup) samples[i - warmup] = elapsed;
            }
        }
        Arrays.sort(samples);
        String version = InterProcessMutex.class.getPackage().getImplementationVersion();
        System.out.printf("RESULT p50_us=%.1f p99_us=%.1f p999_us=%.1f cycles=%d version=curator-%s%n",
                          percentile(samples, 0.5), percentile(samples, 0.99), percentile(samples, 0.999), cycles,
                          version == null ? "unknown" : version);
    }
}
