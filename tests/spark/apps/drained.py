"""Caches an RDD of N numbers in 4 partitions, counting how often a partition is computed;
prints `cached`, waits until the file GO exists, counts the RDD again and prints `computed K`,
the partitions computed in all: 4 when the cache held through whatever happened meanwhile."""
import os
import sys
import time

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("drained").getOrCreate()
sc = spark.sparkContext
n, go = int(sys.argv[1]), sys.argv[2]
computed = sc.accumulator(0)


def compute(index, numbers):
    computed.add(1)
    return numbers


rdd = sc.parallelize(range(n), 4).mapPartitionsWithIndex(compute).cache()
assert rdd.count() == n
print("cached", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
assert rdd.count() == n
print("computed %d" % computed.value, flush=True)
spark.stop()
