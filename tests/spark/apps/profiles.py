"""Stage-level scheduling: a stage of TASKS tasks on the application's own executors, then one
on executors of a resource profile that asks each for a GPU (each task for one). Prints one
`STAGE PARTITION EXECUTOR PROFILE GPUS` line per task (`own` or `gpu`; the executor's id and
its resource profile as Muster launched it; the GPU addresses the task was given, or `-`), and
`profile ID` with the id Spark gave the profile."""

import os
import sys

from pyspark import TaskContext
from pyspark.resource import ExecutorResourceRequests, ResourceProfileBuilder, TaskResourceRequests
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("profiles").getOrCreate()
sc = spark.sparkContext
tasks = int(sys.argv[1])


def where(stage):
    def run(_):
        context = TaskContext.get()
        gpu = context.resources().get("gpu")
        held = ",".join(gpu.addresses) if gpu else "-"
        executor = os.environ["MUSTER_EXECUTOR_ID"]
        profile = os.environ.get("MUSTER_RESOURCE_PROFILE_ID", "0")
        return [(stage, context.partitionId(), executor, profile, held)]

    return run


own = sc.parallelize(range(tasks), tasks).flatMap(where("own")).collect()
executor = ExecutorResourceRequests().cores(1).memory("512m").resource("gpu", 1)
task = TaskResourceRequests().cpus(1).resource("gpu", 1)
profile = ResourceProfileBuilder().require(executor).require(task).build
gpu = sc.parallelize(range(tasks), tasks).withResources(profile).flatMap(where("gpu")).collect()
print(f"profile {profile.id}")
for line in own + gpu:
    print(" ".join(str(field) for field in line))
spark.stop()
