"""TASKS tasks that each sleep SECONDS and return their index; prints `sum N` of the indexes.
Prints `started` once the first task has run, for a test to act during the job; with a third
argument, sleeps that many seconds after the job before stopping (idle executors)."""
import sys
import time

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("sleepy").getOrCreate()
tasks, seconds = int(sys.argv[1]), float(sys.argv[2])
idle = float(sys.argv[3]) if len(sys.argv) > 3 else 0
sc = spark.sparkContext
sc.parallelize([0], 1).count()
print("started", flush=True)


def slow(i):
    time.sleep(seconds)
    return i


total = sc.parallelize(range(tasks), tasks).map(slow).sum()
print("sum %d" % total, flush=True)
time.sleep(idle)
spark.stop()
