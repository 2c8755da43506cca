// Test oracle: Iceberg Java's JdbcCatalog on a catalog database that Floe created.
// Run with the Java source launcher: java -cp <jars> JdbcCatalogProbe.java <jdbc-uri> <warehouse>
// Prints key=value lines for the Python test to check, then commits once through Java.

import java.util.HashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.HasTableOperations;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.jdbc.JdbcCatalog;

public class JdbcCatalogProbe {
  public static void main(String[] args) throws Exception {
    Map<String, String> properties = new HashMap<>();
    properties.put("uri", args[0]);
    properties.put("warehouse", args[1]);
    properties.put("jdbc.strict-mode", "true");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.setConf(new Configuration());
    catalog.initialize("floe", properties);
    try {
      Namespace db = Namespace.of("db");
      print("namespaces", catalog.listNamespaces());
      print("children", catalog.listNamespaces(db));
      print("owner", catalog.loadNamespaceMetadata(db).get("owner"));
      print("tables", catalog.listTables(db));
      print("views", catalog.listViews(db));
      Table table = catalog.loadTable(TableIdentifier.of(db, "t"));
      print("uuid", table.uuid());
      print("columns", table.schema().columns().size());
      table.updateProperties().set("written-by", "iceberg-java").commit();
      print("committed", ((HasTableOperations) table).operations().current().metadataFileLocation());
      catalog.createNamespace(Namespace.of("from_java"), Map.of("k", "v"));
    } finally {
      catalog.close();
    }
  }

  private static void print(String key, Object value) {
    System.out.println(key + "=" + value);
  }
}
