"""Runs TASKS tasks that each write `task-output PARTITION` to their executor's standard error,
then prints, from Spark's own UI, the links it shows to each executor's output: one
`log EXECUTOR STREAM URL` line each."""

import json
import sys
import urllib.request

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("logs").getOrCreate()
sc = spark.sparkContext
tasks = int(sys.argv[1])


def write(partition):
    print(f"task-output {partition}", file=sys.stderr, flush=True)
    return [partition]


assert sorted(sc.parallelize(range(tasks), tasks).flatMap(write).collect()) == list(range(tasks))
url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/executors"
with urllib.request.urlopen(url) as answer:
    executors = json.load(answer)
for executor in executors:
    if executor["id"] != "driver":
        for stream, link in sorted(executor["executorLogs"].items()):
            print(f"log {executor['id']} {stream} {link}")
spark.stop()
