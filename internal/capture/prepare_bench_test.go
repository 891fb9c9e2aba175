package capture

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkBulkInsertMemory assembles and prepares one source transaction of
// 200,000 narrow row events, as `INSERT INTO app.t SELECT 'k'||g, 'v',
// 'u'||(g%100) FROM generate_series(1, N) g` into a registered table sends
// them (every insert, then every fence message), and reports the Go heap it
// keeps per row event while the batch is materialized (live after a
// collection), the most it used meanwhile (sampled every millisecond, garbage
// included: what the process's resident memory follows) and the CPU time per
// row event.
//
//	go test ./internal/capture -run '^$' -bench BulkInsertMemory -benchtime 3x
func BenchmarkBulkInsertMemory(b *testing.B) {
	const rows = 200_000
	reg := bulkRegistry()
	var retained, peak float64
	var cpu time.Duration
	for b.Loop() {
		runtime.GC()
		base := heapLive()
		cpuStart := cpuTime()
		stopSampling := sampleHeap()
		asm := NewAssembler()
		feed(b, asm, relationMessage())
		var txn *Txn
		for msg := range insertTxn(rows) {
			txn = feed(b, asm, msg)
		}
		prepared, err := prepare(txn, reg, 1, batchImages([]*Txn{txn}), func(int64) bool { return true })
		if err != nil {
			b.Fatal(err)
		}
		top := stopSampling()
		cpu += cpuTime() - cpuStart
		runtime.GC()
		retained += float64(heapLive()-base) / rows
		peak += float64(top-base) / rows
		runtime.KeepAlive(txn)
		runtime.KeepAlive(prepared)
	}
	b.ReportMetric(retained/float64(b.N), "retained-B/event")
	b.ReportMetric(peak/float64(b.N), "peak-B/event")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*rows), "cpu-ns/event")
}

// BenchmarkOneRowTransaction assembles and prepares one source transaction of
// one row event (the capture benchmark's 1-row transactions): the worker's Go
// cost per transaction that does not depend on the database.
func BenchmarkOneRowTransaction(b *testing.B) {
	reg := bulkRegistry()
	asm := NewAssembler()
	feed(b, asm, relationMessage())
	var msgs [][]byte
	for msg := range insertTxn(1) {
		msgs = append(msgs, slices.Clone(msg))
	}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		var txn *Txn
		for _, msg := range msgs {
			txn = feed(b, asm, msg)
		}
		if _, err := prepare(txn, reg, 1, batchImages([]*Txn{txn}), func(int64) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used, garbage collection included:
// unlike the benchmark's wall time, it does not grow when the host is busy.
func cpuTime() time.Duration {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// feed feeds asm one message and returns the transaction it completed, if any.
func feed(b *testing.B, asm *Assembler, msg []byte) *Txn {
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
		Registered: Registered{RelationID: 1, Kind: KindSynced,
			Relation: Relation{Schema: "app", Name: "t", OID: bulkOID}, KeyColumn: "id", TableID: &table},
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
// inserting rows rows into app.t. Like the stream, it reuses one buffer: a
// message is gone once the next is yielded.
func insertTxn(rows int) func(yield func([]byte) bool) {
	const lsn = 0x1000000
	u32, u64 := binary.BigEndian.AppendUint32, binary.BigEndian.AppendUint64
	return func(yield func([]byte) bool) {
		buf := make([]byte, 0, 512)
		if !yield(u32(u64(u64(append(buf[:0], 'B'), lsn), 0), 42)) {
			return
		}
		for g := 1; g <= rows; g++ {
			m := append(u32(append(buf[:0], 'I'), bulkOID), 'N', 0, 3)
			for _, v := range [][]byte{strconv.AppendInt([]byte("k"), int64(g), 10), []byte("v"), strconv.AppendInt([]byte("u"), int64(g%100), 10)} {
				m = append(u32(append(m, 't'), uint32(len(v))), v...)
			}
			if !yield(m) {
				return
			}
		}
		for g := 1; g <= rows; g++ {
			m := append(u64(append(buf[:0], 'M', 1), lsn), FencePrefix+"\x00"...)
			m = append(m, 0, 0, 0, 0) // the content's length, set below
			start := len(m)
			m = append(m, `{"registration_kind":"synced","relation_id":1,"relation":{"schema":"app","name":"t","oid":`...)
			m = strconv.AppendInt(m, bulkOID, 10)
			m = append(m, `},"op":"insert","version":"`...)
			m = fmt.Appendf(m, "%032x", g*7919)
			m = fmt.Appendf(m, `","fence_id":"0199a000-0000-7000-8000-%012x","ordinal":`, g)
			m = strconv.AppendInt(m, int64(g), 10)
			m = strconv.AppendInt(append(m, `,"new_key":"k`...), int64(g), 10)
			m = append(m, `","table_id":1}`...)
			binary.BigEndian.PutUint32(m[start-4:], uint32(len(m)-start))
			if !yield(m) {
				return
			}
		}
		yield(u64(u64(u64(append(buf[:0], 'C', 0), lsn), lsn+0x100), 0))
	}
}
