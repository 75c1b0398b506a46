"""The measured application of the shuffle-service experiment: a shuffle of TASKS CPU-bound map
tasks, a pause of PAUSE seconds in the driver (a notebook's user reading the result, a
pipeline waiting for its next input), then a second job on the same shuffle's output. Prints
one JSON line with the seconds from START (the epoch time its spark-submit began) to the end,
and how many map tasks ran in all (TASKS when the second job found the first's output)."""
import json
import random
import sys
import time
from operator import add

from pyspark.sql import SparkSession

start, tasks, samples, pause = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
spark = SparkSession.builder.appName("dynamic").getOrCreate()
sc = spark.sparkContext
computed = sc.accumulator(0)


def points(seed):
    computed.add(1)
    rng = random.Random(seed)
    for _ in range(samples):
        x, y = rng.random(), rng.random()
        yield (int(x * 100), int(x * x + y * y <= 1))


hits = sc.parallelize(range(tasks), tasks).flatMap(points).reduceByKey(add, tasks)
first = hits.values().sum()
time.sleep(pause)
second = hits.values().sum()
assert first == second
done = time.time()
print(json.dumps({"total_s": round(done - start, 3), "map_tasks": computed.value}), flush=True)
spark.stop()
