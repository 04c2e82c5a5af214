// Peer of the comparison suite (benchmarks/suite/probes_zookeeper.cpp): Apache Curator's InterProcessMutex (Debian
// libcurator-recipes-java). The probe compiles this file with javac into a temporary directory
// against the jars in /usr/share/java and runs it on the same ZooKeeper server as dlock.
//
//   java -cp DIR:JARS CuratorBench CONNECT CYCLES WARMUP
//
// Times CYCLES uncontended acquire+release cycles of one lock after WARMUP untimed ones (JIT warm-up),
// on one session, with Curator's defaults (it waits on a watch of its predecessor; nothing to tune).
// Prints one JSON object (the contract of benchmarks/peers/peer_harness.py): {"s1_us": [...]} with
// every sample in microseconds, or {"s1_error": "..."} when Curator fails.
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;

public final class CuratorBench {
    public static void main(String[] args) {
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
        } catch (Exception e) {
            System.out.println("{\"s1_error\": \"" + (e.getClass().getSimpleName() + ": " + e.getMessage())
                                   .replace("\\", "\\\\").replace("\"", "\\\"") + "\"}");
            return;
        }
        final StringBuilder json = new StringBuilder("{\"s1_us\": [");
        for (int i = 0; i < cycles; i++) json.append(i == 0 ? "" : ", ").append(samples[i] / 1000.0);
        System.out.println(json.append("]}"));
    }
}
