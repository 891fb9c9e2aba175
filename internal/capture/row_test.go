package capture

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
)

// relationMsg is the relation message of app.t (id text key, v text, n int4).
func relationMsg() []byte {
	m := binary.BigEndian.AppendUint32([]byte{'R'}, 7)
	m = append(m, "app\x00t\x00d\x00\x03"...)
	for _, c := range []struct {
		flags byte
		name  string
		oid   uint32
	}{{1, "id", 25}, {0, "v", 25}, {0, "n", 23}} {
		m = append(append(m, c.flags), c.name+"\x00"...)
		m = binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(m, c.oid), 0xffffffff)
	}
	return m
}

// tuple encodes a TupleData: "n" null, "u" unchanged TOAST, else text.
func tuple(values ...string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(values)))
	for _, v := range values {
		switch v {
		case "n", "u":
			b = append(b, v[0])
		default:
			b = append(binary.BigEndian.AppendUint32(append(b, 't'), uint32(len(v))), v...)
		}
	}
	return b
}

func rowMsg(kind byte, parts ...[]byte) []byte {
	m := binary.BigEndian.AppendUint32([]byte{kind}, 7)
	for _, p := range parts {
		m = append(m, p...)
	}
	return m
}

func col(name string, oid uint32, text string) Column {
	switch text {
	case "n":
		return Column{Name: name, TypeOID: oid, Null: true}
	case "u":
		return Column{Name: name, TypeOID: oid, Unchanged: true}
	}
	return Column{Name: name, TypeOID: oid, Text: text}
}

// feedRow feeds one row message in a transaction and returns its event.
func feedRow(t *testing.T, msg []byte, spillAt int64) (*Txn, *RowEvent, error) {
	t.Helper()
	a := NewAssembler()
	a.SpillAbove(spillAt, t.TempDir())
	for _, m := range [][]byte{relationMsg(), append([]byte{'B'}, make([]byte, 20)...)} {
		if _, err := a.Feed(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Feed(msg); err != nil {
		return nil, nil, err
	}
	txn := a.Open()
	t.Cleanup(txn.Release)
	return txn, &txn.Rows[0], nil
}

// A row event keeps its key columns decoded; Load decodes every column, also
// of an event whose message went to the spill file.
func TestRowMessages(t *testing.T) {
	for _, c := range []struct {
		name           string
		msg            []byte
		keyOld, keyNew []Column
		fullOld, full  []Column
		op             string
		unchanged      bool
	}{
		{name: "insert", msg: rowMsg('I', []byte{'N'}, tuple("k1", "n", "7")), op: "insert",
			keyNew: []Column{col("id", 25, "k1")}, full: []Column{col("id", 25, "k1"), col("v", 25, "n"), col("n", 23, "7")}},
		{name: "update", msg: rowMsg('U', []byte{'N'}, tuple("k1", "u", "8")), op: "update", unchanged: true,
			keyNew: []Column{col("id", 25, "k1")}, full: []Column{col("id", 25, "k1"), col("v", 25, "u"), col("n", 23, "8")}},
		{name: "update with key", msg: rowMsg('U', []byte{'K'}, tuple("k0", "n", "n"), []byte{'N'}, tuple("k1", "", "8")), op: "update",
			keyOld: []Column{col("id", 25, "k0")}, fullOld: []Column{col("id", 25, "k0"), col("v", 25, "n"), col("n", 23, "n")},
			keyNew: []Column{col("id", 25, "k1")}, full: []Column{col("id", 25, "k1"), col("v", 25, ""), col("n", 23, "8")}},
		{name: "delete", msg: rowMsg('D', []byte{'K'}, tuple("k1", "n", "n")), op: "delete",
			keyOld: []Column{col("id", 25, "k1")}, fullOld: []Column{col("id", 25, "k1"), col("v", 25, "n"), col("n", 23, "n")}},
	} {
		for _, spillAt := range []int64{0, 1} {
			txn, ev, err := feedRow(t, c.msg, spillAt)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if ev.Op != c.op || !reflect.DeepEqual(ev.Old, c.keyOld) || !reflect.DeepEqual(ev.New, c.keyNew) || txn.Unchanged != c.unchanged {
				t.Fatalf("%s: fed %s %+v %+v (unchanged %v)", c.name, ev.Op, ev.Old, ev.New, txn.Unchanged)
			}
			if (txn.Spill() != nil) != (spillAt > 0) {
				t.Fatalf("%s: spill file %v with threshold %d", c.name, txn.Spill(), spillAt)
			}
			if err := txn.Load(ev); err != nil {
				t.Fatalf("%s: load: %v", c.name, err)
			}
			if !reflect.DeepEqual(ev.Old, c.fullOld) || !reflect.DeepEqual(ev.New, c.full) {
				t.Fatalf("%s: loaded %+v %+v", c.name, ev.Old, ev.New)
			}
		}
	}
}

func TestMalformedRowMessages(t *testing.T) {
	insert := rowMsg('I', []byte{'N'}, tuple("k1", "v", "7"))
	for _, c := range []struct {
		name, err string
		msg       []byte
	}{
		{"truncated value", "truncated", insert[:len(insert)-1]},
		{"truncated header", "truncated", insert[:4]},
		{"column count", "has 2 columns, relation message 3", rowMsg('I', []byte{'N'}, tuple("k1", "v"))},
		{"binary value", "unsupported tuple data kind 'b'", rowMsg('I', []byte{'N'}, []byte{0, 1, 'b', 0, 0, 0, 0})},
		{"unknown kind", "unsupported tuple data kind 'x'", rowMsg('I', []byte{'N'}, []byte{0, 1, 'x'})},
		{"insert without new tuple", "without a new tuple", rowMsg('I', []byte{'K'}, tuple("k1", "v", "7"))},
		{"delete without old tuple", "without a key or old tuple", rowMsg('D', []byte{'N'}, tuple("k1", "v", "7"))},
		{"unknown relation", "on relation 8 without a relation message", append([]byte{'I', 0, 0, 0, 8}, insert[5:]...)},
	} {
		if _, _, err := feedRow(t, c.msg, 0); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.err)
		}
	}
}
