"""Estimates pi from random points in PARTITIONS tasks, as Spark's own example does."""
import sys
from operator import add
from random import random

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("pi").getOrCreate()
partitions = int(sys.argv[1])
n = 100000 * partitions


def inside(_):
    x, y = random() * 2 - 1, random() * 2 - 1
    return 1 if x * x + y * y <= 1 else 0


count = spark.sparkContext.parallelize(range(n), partitions).map(inside).reduce(add)
print("pi %f" % (4.0 * count / n))
spark.stop()
