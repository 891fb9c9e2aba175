package logging

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestDurationsAreReadable: a duration attribute is written as a readable
// string, not as nanoseconds, and lines are JSON.
func TestDurationsAreReadable(t *testing.T) {
	var buf bytes.Buffer
	NewAt(&buf, nil).Info("capture caught up", "duration", 170*time.Second+312*time.Millisecond,
		"acknowledge", 29976311*time.Nanosecond, "short", 840*time.Microsecond+123*time.Nanosecond)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("log line %q is not JSON: %v", buf.String(), err)
	}
	for k, want := range map[string]string{"duration": "2m50.3s", "acknowledge": "29.98ms", "short": "840.1µs"} {
		if line[k] != want {
			t.Errorf("%s = %v, want %q (line %s)", k, line[k], want, buf.String())
		}
	}
}
