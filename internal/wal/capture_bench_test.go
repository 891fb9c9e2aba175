package wal

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/synchro-sync/synchro/internal/capture"
)

// BenchmarkBulkInsertMemory assembles and prepares one source transaction of
// 200,000 narrow row events, as `INSERT INTO app.t SELECT 'k'||g, 'v',
// 'u'||(g%100) FROM generate_series(1, N) g` into a registered table sends
// them (every insert, then every fence message), and reports the Go heap it
// keeps per row event while the batch is materialized (live after a
// collection) and the most it used meanwhile (sampled every millisecond,
// garbage included: what the process's resident memory follows).
//
//	go test ./internal/wal -run '^$' -bench BulkInsertMemory -benchtime 3x
func BenchmarkBulkInsertMemory(b *testing.B) {
	const rows = 200_000
	reg := bulkRegistry()
	var retained, peak float64
	for b.Loop() {
		runtime.GC()
		base := heapLive()
		stopSampling := sampleHeap()
		asm := capture.NewAssembler()
		feed(b, asm, relationMessage())
		var txn *capture.Txn
		for msg := range insertTxn(rows) {
			txn = feed(b, asm, msg)
		}
		prepared, err := prepare(txn, reg, 1, batchImages([]*capture.Txn{txn}))
		if err != nil {
			b.Fatal(err)
		}
		top := stopSampling()
		runtime.GC()
		retained += float64(heapLive()-base) / rows
		peak += float64(top-base) / rows
		runtime.KeepAlive(txn)
		runtime.KeepAlive(prepared)
	}
	b.ReportMetric(retained/float64(b.N), "retained-B/event")
	b.ReportMetric(peak/float64(b.N), "peak-B/event")
}

// BenchmarkOneRowTransaction assembles and prepares one source transaction of
// one row event (the capture benchmark's 1-row transactions): the worker's Go
// cost per transaction that does not depend on the database.
func BenchmarkOneRowTransaction(b *testing.B) {
	reg := bulkRegistry()
	asm := capture.NewAssembler()
	feed(b, asm, relationMessage())
	var msgs [][]byte
	for msg := range insertTxn(1) {
		msgs = append(msgs, msg)
	}
	b.ReportAllocs()
	for b.Loop() {
		var txn *capture.Txn
		for _, msg := range msgs {
			txn = feed(b, asm, msg)
		}
		if _, err := prepare(txn, reg, 1, batchImages([]*capture.Txn{txn})); err != nil {
			b.Fatal(err)
		}
	}
}

// feed feeds asm one message and returns the transaction it completed, if any.
func feed(b *testing.B, asm *capture.Assembler, msg []byte) *capture.Txn {
	txn, err := asm.Feed(msg)
	if err != nil {
		b.Fatal(err)
	}
	return txn
}

// heapLive is the bytes of heap objects, garbage not yet collected included.
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sampleHeap samples heapLive every millisecond until the returned function
// is called, which returns the highest sample.
func sampleHeap() func() uint64 {
	var mu sync.Mutex
	top := heapLive()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				h := heapLive()
				mu.Lock()
				top = max(top, h)
				mu.Unlock()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return max(top, heapLive())
	}
}

const bulkOID = 16400

// bulkRegistry registers app.t (id text key, v text, owner text) as table 1.
func bulkRegistry() *registry {
	table := int32(1)
	reg := registration{
		Registered: capture.Registered{RelationID: 1, Kind: capture.KindSynced,
			Relation: capture.Relation{Schema: "app", Name: "t", OID: bulkOID}, KeyColumn: "id", TableID: &table},
		Generation: 1, KeyType: "string",
		Columns: map[string]uint32{"id": 25, "v": 25, "owner": 25},
	}
	return &registry{byOID: map[uint32]registration{bulkOID: reg}, byRel: map[int64]registration{1: reg},
		byName: map[[2]string]registration{{"app", "t"}: reg}, latest: 1}
}

// relationMessage is app.t's relation message (pgoutput protocol 1).
func relationMessage() []byte {
	u32 := binary.BigEndian.AppendUint32
	rel := append(u32([]byte{'R'}, bulkOID), "app\x00t\x00d\x00\x03"...)
	for i, col := range []string{"id", "v", "owner"} {
		rel = append(rel, byte(max(0, 1-i)))                       // flags: key column
		rel = u32(u32(append(rel, col+"\x00"...), 25), 0xffffffff) // text, no typmod
	}
	return rel
}

// insertTxn yields the pgoutput messages (protocol 1) of one transaction
// inserting rows rows into app.t, each in a buffer of its own as the stream
// hands them over.
func insertTxn(rows int) func(yield func([]byte) bool) {
	const lsn = 0x1000000
	u32, u64 := binary.BigEndian.AppendUint32, binary.BigEndian.AppendUint64
	return func(yield func([]byte) bool) {
		if !yield(u32(u64(u64([]byte{'B'}, lsn), 0), 42)) {
			return
		}
		for g := 1; g <= rows; g++ {
			m := append(u32([]byte{'I'}, bulkOID), 'N', 0, 3)
			for _, v := range []string{fmt.Sprintf("k%d", g), "v", fmt.Sprintf("u%d", g%100)} {
				m = append(u32(append(m, 't'), uint32(len(v))), v...)
			}
			if !yield(m) {
				return
			}
		}
		for g := 1; g <= rows; g++ {
			fence := fmt.Sprintf(`{"registration_kind":"synced","relation_id":1,"relation":{"schema":"app","name":"t","oid":%d},`+
				`"op":"insert","version":"%032x","fence_id":"0199a000-0000-7000-8000-%012x","ordinal":%d,"new_key":"k%d","table_id":1}`,
				bulkOID, g*7919, g, g, g)
			m := append(u64([]byte{'M', 1}, lsn), capture.FencePrefix+"\x00"...)
			if !yield(append(u32(m, uint32(len(fence))), fence...)) {
				return
			}
		}
		yield(u64(u64(u64([]byte{'C', 0}, lsn), lsn+0x100), 0))
	}
}
