"""TASKS tasks that each sleep SECONDS and return their index; prints `sum N` of the indexes.
Prints `started` once the first task has run, for a test to act during the job. A third
argument IDLE sleeps that many seconds after the job before stopping (idle executors); a fourth,
HOLD, a path, keeps each task running, after its sleep, for as long as that file exists."""
import os
import sys
import time

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("sleepy").getOrCreate()
tasks, seconds = int(sys.argv[1]), float(sys.argv[2])
idle = float(sys.argv[3]) if len(sys.argv) > 3 else 0
hold = sys.argv[4] if len(sys.argv) > 4 else None
sc = spark.sparkContext
sc.parallelize([0], 1).count()
print("started", flush=True)


def slow(i):
    time.sleep(seconds)
    while hold and os.path.exists(hold):
        time.sleep(0.1)
    return i


total = sc.parallelize(range(tasks), tasks).map(slow).sum()
print("sum %d" % total, flush=True)
time.sleep(idle)
spark.stop()
