import java.util.ArrayList;
import java.util.List;

import org.apache.spark.api.java.JavaPairRDD;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;
import scala.Tuple2;

/**
 * Sums the squares of 1..N by their remainder modulo 10, through a shuffle, and prints `R SUM` lines;
 * then the driver's resources, if it has any, as `driver NAME ADDRESSES` lines on standard error.
 */
public final class SquareSums {
    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]);
        SparkSession spark = SparkSession.builder().appName("square-sums").getOrCreate();
        JavaSparkContext sc = new JavaSparkContext(spark.sparkContext());
        List<Long> numbers = new ArrayList<>();
        for (long i = 1; i <= n; i++) {
            numbers.add(i);
        }
        JavaPairRDD<Long, Long> sums = sc.parallelize(numbers, 8)
                .mapToPair(i -> new Tuple2<>(i % 10, i * i))
                .reduceByKey(Long::sum, 4)
                .sortByKey();
        for (Tuple2<Long, Long> sum : sums.collect()) {
            System.out.println(sum._1() + " " + sum._2());
        }
        // The driver's own resources (its GPUs), on standard error: `driver gpu ADDRESS,...`.
        spark.sparkContext().resources().foreach(resource -> {
            System.err.println("driver " + resource._1() + " " + String.join(",", resource._2().addresses()));
            return null;
        });
        spark.stop();
    }
}
