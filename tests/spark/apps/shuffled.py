"""Sums 0..N-1 by their remainder modulo 10 through a shuffle over 4 map partitions, counting
how often a map partition is computed; prints `shuffled`, waits until the file GO exists, reads
the shuffle's output again and prints the sums (`R SUM` lines) and `computed K`, the map
partitions computed in all: 4 when the second read found the first's map output."""
import os
import sys
import time
from operator import add

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("shuffled").getOrCreate()
sc = spark.sparkContext
n, go = int(sys.argv[1]), sys.argv[2]
computed = sc.accumulator(0)


def compute(index, numbers):
    computed.add(1)
    return numbers


sums = (
    sc.parallelize(range(n), 4)
    .mapPartitionsWithIndex(compute)
    .map(lambda x: (x % 10, x))
    .reduceByKey(add, 2)
)
first = sorted(sums.collect())
print("shuffled", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
second = sorted(sums.collect())
assert first == second, (first, second)
for remainder, total in second:
    print(remainder, total)
print("computed %d" % computed.value, flush=True)
spark.stop()
