"""Counts the words of INPUT with a shuffle, and writes `word count` lines, sorted, to OUTPUT."""
import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("wordcount").getOrCreate()
source, target = sys.argv[1], sys.argv[2]
counts = (
    spark.sparkContext.textFile(source, 8)
    .flatMap(lambda line: line.split())
    .map(lambda word: (word, 1))
    .reduceByKey(lambda a, b: a + b, 4)
    .collect()
)
with open(target, "w") as out:
    for word, count in sorted(counts):
        out.write("%s %d\n" % (word, count))
spark.stop()
