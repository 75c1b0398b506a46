"""Waits for EXECUTORS executors, then prints the GPU addresses each of TASKS tasks was
given, one `task PARTITION ADDRESSES` line each."""

import sys
import time

from pyspark import TaskContext
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("gpus").getOrCreate()
executors, tasks = int(sys.argv[1]), int(sys.argv[2])
deadline = time.monotonic() + 120
# The driver counts among the block managers.
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < executors + 1:
    if time.monotonic() > deadline:
        sys.exit(f"fewer than {executors} executors registered")
    time.sleep(0.2)


def addresses(_):
    time.sleep(0.5)
    context = TaskContext.get()
    return [(context.partitionId(), ",".join(context.resources()["gpu"].addresses))]


for partition, held in spark.sparkContext.parallelize(range(tasks), tasks).flatMap(addresses).collect():
    print(f"task {partition} {held}")
spark.stop()
