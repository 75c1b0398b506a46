"""The priority experiment's Spark applications (`muster experiment priority --spark`), named
by spark-submit's --name: `sleep TASKS MS`, the long ordinary job, whose tasks each sleep MS
milliseconds; or `pi TASKS SAMPLES`, a prior or control job of CPU-bound tasks, which prints
its estimate."""
import random
import sys
import time

from pyspark.sql import SparkSession

mode, tasks, amount = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sc = SparkSession.builder.getOrCreate().sparkContext


def sleep(i):
    time.sleep(amount / 1000)
    return i


def inside(seed):
    rng = random.Random(seed)
    hits = 0
    for _ in range(amount):
        x, y = rng.random(), rng.random()
        hits += x * x + y * y <= 1
    return hits


if mode == "sleep":
    sc.parallelize(range(tasks), tasks).map(sleep).count()
else:
    hits = sc.parallelize(range(tasks), tasks).map(inside).sum()
    print("pi %f" % (4.0 * hits / (tasks * amount)), flush=True)
sc.stop()
