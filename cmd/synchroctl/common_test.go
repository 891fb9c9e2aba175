package main

import "testing"

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0:                    "0 B",
		1023:                 "1023 B",
		1024:                 "1.0 KiB",
		1536:                 "1.5 KiB",
		1<<20 - 1:            "1.0 MiB",
		20*1<<20 + 400*1<<10: "20.4 MiB",
		3 << 30:              "3.0 GiB",
		5 << 40:              "5.0 TiB",
		1<<63 - 1:            "8.0 EiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for s, want := range map[float64]string{
		-1:       "unknown",
		0:        "0s",
		1.2504:   "1.25s",
		90.4:     "1m30s",
		604803.6: "168h0m4s",
	} {
		if got := seconds(s); got != want {
			t.Errorf("seconds(%v) = %q, want %q", s, got, want)
		}
	}
}
