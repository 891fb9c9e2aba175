package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOperationsDocNamesEveryMetric keeps the metrics list of docs/operations.md
// in step with the metrics this package exports.
func TestOperationsDocNamesEveryMetric(t *testing.T) {
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`"(synchro_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 10 {
		t.Fatalf("found %d metric names in metrics.go; the pattern no longer matches how they are declared", len(names))
	}
	for _, n := range names {
		if !strings.Contains(string(readme), "`"+n[1]) {
			t.Errorf("docs/operations.md does not name the metric %s", n[1])
		}
	}
}
