package io.muster.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import scala.Tuple2;

/**
 * Scala collections as Java's, written against what Scala 2.12 and 2.13 share ({@code
 * iterator()}), so that one source builds the plug-in for Spark 3.5 and 4.x.
 */
final class ScalaCollections {
    private ScalaCollections() {}

    /** The elements of {@code iterable}, in order. */
    static <T> List<T> list(scala.collection.Iterable<T> iterable) {
        List<T> list = new ArrayList<>();
        scala.collection.Iterator<T> elements = iterable.iterator();
        while (elements.hasNext()) {
            list.add(elements.next());
        }
        return list;
    }

    /** The entries of {@code map}, in its order. */
    static <K, V> Map<K, V> map(scala.collection.Map<K, V> map) {
        Map<K, V> entries = new LinkedHashMap<>();
        scala.collection.Iterator<Tuple2<K, V>> pairs = map.iterator();
        while (pairs.hasNext()) {
            Tuple2<K, V> pair = pairs.next();
            entries.put(pair._1(), pair._2());
        }
        return entries;
    }
}
