package metrics

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMENamesEveryMetric keeps README's "Operating Synchro" list of metrics
// in step with the metrics this package exports.
func TestREADMENamesEveryMetric(t *testing.T) {
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`"(synchro_[a-z_]+)"`).FindAllStringSubmatch(string(src), -1)
	if len(names) < 10 {
		t.Fatalf("found %d metric names in metrics.go; the pattern no longer matches how they are declared", len(names))
	}
	for _, n := range names {
		if !strings.Contains(string(readme), "`"+n[1]) {
			t.Errorf("README does not name the metric %s", n[1])
		}
	}
}
