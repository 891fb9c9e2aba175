package capture

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// batchJSON writes what encoding/json wrote for the batch before.
func TestBatchJSON(t *testing.T) {
	type jsonTxn struct {
		CommitLSN          string    `json:"commit_lsn"`
		EndLSN             string    `json:"end_lsn"`
		Xid                uint32    `json:"xid"`
		CommitTime         time.Time `json:"commit_time"`
		EventCount         int       `json:"event_count"`
		Applied            int       `json:"applied"`
		RegistryGeneration int64     `json:"registry_generation"`
		Bootstrap          *string   `json:"bootstrap"`
	}
	commit := time.Date(2026, 12, 2, 3, 4, 5, 123456000, time.UTC)
	txns := []Prepared{
		{CommitLSN: 0x16B374D848, EndLSN: 0x16B374D8A0, Xid: 4294967295, CommitTime: commit, EventCount: 3, Applied: 2, RegistryGeneration: 7},
		{CommitLSN: pglogrepl.LSN(0xFFFFFFFF00000001), EndLSN: 0, CommitTime: commit.Truncate(time.Second).In(time.FixedZone("x", 3600)),
			Bootstrap: "0b9a8c1e-5f7d-4c2a-9e3b-1d2c3b4a5f60"},
	}
	var want []jsonTxn
	for _, t := range txns {
		var boot *string
		if t.Bootstrap != "" {
			boot = &t.Bootstrap
		}
		want = append(want, jsonTxn{t.CommitLSN.String(), t.EndLSN.String(), t.Xid, t.CommitTime, t.EventCount, t.Applied, t.RegistryGeneration, boot})
	}
	w, _ := json.Marshal(want)
	if got := batchJSON(txns); string(got) != string(w) {
		t.Fatalf("batchJSON = %s, want %s", got, w)
	}
	if got := batchJSON(nil); string(got) != "[]" {
		t.Fatalf("batchJSON(nil) = %s", got)
	}
}

// overlay completes a partial image whose row holds json nested deeper than
// encoding/json reads (10,000 levels): it used to fail the transaction as a
// decode error, blocking capture.
func TestOverlayDeepJSON(t *testing.T) {
	deep := strings.Repeat("[", 10001) + "1e400" + strings.Repeat("]", 10001)
	got, err := overlay(json.RawMessage(`{"id":"k","big":"`+strings.Repeat("x", 3000)+`","j":`+deep+`,"n":1}`),
		json.RawMessage(`{"id":"k","n":2,"k":`+deep+`}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"big":"` + strings.Repeat("x", 3000) + `","id":"k","j":` + deep + `,"k":` + deep + `,"n":2}`
	if string(got) != want {
		t.Fatalf("overlay = %.80s..., want %.80s...", got, want)
	}
}
