"""The measured application: waits until EXECUTORS executors have registered with it, then
estimates pi in TASKS CPU-bound tasks of SAMPLES points each. Prints one JSON line with the
seconds from START (the epoch time its spark-submit began) until every executor had
registered and until the job was done."""
import json
import random
import sys
import time

from pyspark.sql import SparkSession

start, executors, tasks, samples = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
spark = SparkSession.builder.appName("experiment").getOrCreate()
sc = spark.sparkContext
# The driver counts as one block manager.
while sc._jsc.sc().getExecutorMemoryStatus().size() < executors + 1:
    time.sleep(0.02)
registered = time.time()


def inside(seed):
    rng = random.Random(seed)
    hits = 0
    for _ in range(samples):
        x, y = rng.random(), rng.random()
        hits += x * x + y * y <= 1
    return hits


hits = sc.parallelize(range(tasks), tasks).map(inside).sum()
done = time.time()
print(json.dumps({
    "pi": 4.0 * hits / (tasks * samples),
    "registered_s": round(registered - start, 3),
    "job_s": round(done - registered, 3),
    "total_s": round(done - start, 3),
}), flush=True)
spark.stop()
