package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/synchro-sync/synchro/internal/wire"
)

// Message prefixes emitted by sql/functions/capture/fence.sql,
// sql/functions/registry/activate_registry_generation.sql and
// sql/functions/reset/request_barrier.sql.
const (
	FencePrefix    = "synchro.fence"
	RegistryPrefix = "synchro.registry"
	BarrierPrefix  = "synchro.reset"
)

// Registration kinds.
const (
	KindSynced     = "synced"
	KindDependency = "capture_dependency"
)

// Relation is a schema-qualified physical relation identity.
type Relation struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	OID    uint32 `json:"oid"`
}

// Fence is one write fence: the trigger's record of one row operation.
type Fence struct {
	*FenceTarget
	Op      string          `json:"op"`
	Version string          `json:"version"`
	FenceID string          `json:"fence_id"`
	Ordinal int64           `json:"ordinal"`
	OldKey  json.RawMessage `json:"old_key,omitempty"`
	NewKey  json.RawMessage `json:"new_key,omitempty"`
}

// FenceTarget is what a fence's row operation applies to: the registration
// and relation. A transaction's fences share one while they apply to the same.
type FenceTarget struct {
	RegistrationKind string   `json:"registration_kind"`
	RelationID       int64    `json:"relation_id"`
	Relation         Relation `json:"relation"`
	TableID          *int32   `json:"table_id,omitempty"`
}

// Key is the canonical text of the fence's row identity key (new key for
// inserts and updates, old key for deletes), as pgoutput renders key values.
func (f Fence) Key() string {
	raw := f.NewKey
	if f.Op == "delete" {
		raw = f.OldKey
	}
	key, _ := KeyText(raw) // ParseFence validated it
	return key
}

// ParseFence decodes and validates one fence message. Every field is required
// as the registration kind and operation dictate; unknown fields are rejected.
func ParseFence(b []byte) (Fence, error) { return parseFence(b, nil) }

// parseFence is ParseFence; the fence shares target when it applies to the
// same (the trigger's layout only).
func parseFence(b []byte, target *FenceTarget) (Fence, error) {
	f, ok := parseLayout(b, target)
	if !ok {
		var err error
		if f, err = decodeFence(b); err != nil {
			return f, err
		}
	}
	switch {
	case f.RelationID <= 0:
		return f, fmt.Errorf("fence message: missing relation_id")
	case f.Relation.Schema == "" || f.Relation.Name == "" || f.Relation.OID == 0:
		return f, fmt.Errorf("fence message: incomplete relation identity")
	case f.Version == "":
		return f, fmt.Errorf("fence message: missing version")
	case !canonicalUUID(f.FenceID):
		return f, fmt.Errorf("fence message: fence_id is not a canonical UUID")
	case f.Ordinal <= 0:
		return f, fmt.Errorf("fence message: ordinal must be positive")
	}
	switch f.RegistrationKind {
	case KindSynced:
		if f.TableID == nil || *f.TableID <= 0 {
			return f, fmt.Errorf("fence message: synced registration without table_id")
		}
	case KindDependency:
		if f.TableID != nil {
			return f, fmt.Errorf("fence message: capture_dependency registration with table_id")
		}
	default:
		return f, fmt.Errorf("fence message: unknown registration_kind")
	}
	hasOld, hasNew := len(f.OldKey) > 0, len(f.NewKey) > 0
	oldText, oldValid := KeyText(f.OldKey)
	newText, newValid := KeyText(f.NewKey)
	switch f.Op {
	case "insert":
		if hasOld || !hasNew {
			return f, fmt.Errorf("fence message: insert needs new_key only")
		}
	case "update":
		if !hasOld || !hasNew || oldText != newText {
			return f, fmt.Errorf("fence message: update needs equal old_key and new_key")
		}
	case "delete":
		if !hasOld || hasNew {
			return f, fmt.Errorf("fence message: delete needs old_key only")
		}
	default:
		return f, fmt.Errorf("fence message: unknown op")
	}
	if hasOld && !oldValid || hasNew && !newValid {
		return f, fmt.Errorf("fence message: key is not a string or integer")
	}
	return f, nil
}

// decodeFence decodes a fence message in any JSON layout with encoding/json:
// one object (case-insensitive member names, the last of duplicate members
// wins), no unknown members, nothing after it but whitespace.
func decodeFence(b []byte) (Fence, error) {
	f := Fence{FenceTarget: &FenceTarget{}}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("fence message: %w", err)
	}
	if len(bytes.TrimSpace(b[dec.InputOffset():])) > 0 {
		return f, fmt.Errorf("fence message: trailing data")
	}
	return f, nil
}

// parseLayout is the fast path for the one layout the fence trigger emits
// (synchro.fence_source: compact, members in a fixed order; it takes strings
// without escapes and integers). It reports false for anything else,
// which then goes through decodeFence. What it accepts, decodeFence decodes to
// the same Fence (FuzzParseLayout checks this). Only the values are copied out
// of b, not the whole message, and the registration kind and operation are
// the package's constants when they are one of them: a transaction keeps
// every fence it buffers. The fence's target is shared when it equals it.
func parseLayout(b []byte, shared *FenceTarget) (Fence, bool) {
	var f Fence
	var t, last FenceTarget
	if shared != nil {
		last = *shared
	}
	p := layout{b: b, ok: true}
	t.RegistrationKind = known(p.str(`{"registration_kind":`), KindSynced, KindDependency)
	t.RelationID = p.int(`,"relation_id":`, 64)
	t.Relation.Schema = known(p.str(`,"relation":{"schema":`), last.Relation.Schema)
	t.Relation.Name = known(p.str(`,"name":`), last.Relation.Name)
	t.Relation.OID = uint32(p.uint(`,"oid":`, 32))
	f.Op = known(p.str(`},"op":`), "insert", "update", "delete")
	f.Version = string(p.str(`,"version":`))
	f.FenceID = string(p.str(`,"fence_id":`))
	f.Ordinal = p.int(`,"ordinal":`, 64)
	if p.skip(`,"old_key":`) {
		f.OldKey = p.key()
	}
	if p.skip(`,"new_key":`) {
		f.NewKey = p.key()
	}
	var tableID int32
	hasTable := p.skip(`,"table_id":`)
	if hasTable {
		tableID = int32(p.int("", 32))
	}
	p.expect("}")
	f.FenceTarget = shareTarget(shared, t, hasTable, tableID)
	return f, p.ok && p.i == len(p.b)
}

// shareTarget returns shared when it is t with the given table id, else a new
// target.
func shareTarget(shared *FenceTarget, t FenceTarget, hasTable bool, tableID int32) *FenceTarget {
	if shared != nil && t.RegistrationKind == shared.RegistrationKind && t.RelationID == shared.RelationID &&
		t.Relation == shared.Relation && hasTable == (shared.TableID != nil) && (!hasTable || tableID == *shared.TableID) {
		return shared
	}
	n := new(FenceTarget)
	*n = t
	if hasTable {
		n.TableID = new(int32)
		*n.TableID = tableID
	}
	return n
}

// known returns the one of names that b spells, else a copy of b.
func known(b []byte, names ...string) string {
	for _, n := range names {
		if string(b) == n {
			return n
		}
	}
	return string(b)
}

// layout reads a message left to right; ok turns false at the first byte that
// does not fit, and every later read then does nothing.
type layout struct {
	b  []byte
	i  int
	ok bool
}

// skip consumes prefix if it comes next.
func (p *layout) skip(prefix string) bool {
	rest := p.b[p.i:]
	if p.ok && len(rest) >= len(prefix) && string(rest[:len(prefix)]) == prefix {
		p.i += len(prefix)
		return true
	}
	return false
}

// expect consumes prefix, which must come next.
func (p *layout) expect(prefix string) {
	if !p.skip(prefix) {
		p.ok = false
	}
}

// str consumes prefix and a string that needs no unescaping, returning its content.
func (p *layout) str(prefix string) []byte {
	p.expect(prefix)
	p.expect(`"`)
	n := bytes.IndexByte(p.b[p.i:], '"')
	if !p.ok || n < 0 || !plain(p.b[p.i:p.i+n]) {
		p.ok = false
		return nil
	}
	s := p.b[p.i : p.i+n]
	p.i += n + 1 // and the closing quote
	return s
}

// num consumes prefix and a JSON integer, returning its text.
func (p *layout) num(prefix string) []byte {
	p.expect(prefix)
	rest := p.b[p.i:]
	n := 0
	for n < len(rest) && (rest[n] == '-' || '0' <= rest[n] && rest[n] <= '9') {
		n++
	}
	if !p.ok || !wire.PlainInteger(string(rest[:n])) {
		p.ok = false
		return nil
	}
	p.i += n
	return rest[:n]
}

// int and uint consume prefix and an integer that encoding/json would store in
// a signed or unsigned field of that many bits.
func (p *layout) int(prefix string, bits int) int64 {
	n, err := strconv.ParseInt(string(p.num(prefix)), 10, bits)
	if err != nil {
		p.ok = false
	}
	return n
}

func (p *layout) uint(prefix string, bits int) uint64 {
	n, err := strconv.ParseUint(string(p.num(prefix)), 10, bits)
	if err != nil {
		p.ok = false
	}
	return n
}

// key consumes a string or integer key, returning a copy of its JSON text.
func (p *layout) key() json.RawMessage {
	start := p.i
	if p.skip(`"`) {
		p.i-- // str reads the quote again
		p.str("")
	} else {
		p.num("")
	}
	return bytes.Clone(p.b[start:p.i])
}

// plain reports whether JSON string content s decodes to itself: no quote,
// backslash or control character, and valid UTF-8 (encoding/json replaces
// invalid bytes).
func plain(s []byte) bool {
	for _, c := range s {
		if c == '"' || c == '\\' || c < ' ' {
			return false
		}
	}
	return utf8.Valid(s)
}

// canonicalUUID reports whether s is a UUID in canonical lowercase text form,
// 8-4-4-4-12 hex digits.
func canonicalUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// KeyText renders a JSON key (string or integer) as canonical text; valid is
// false when it is neither. The empty string is a valid string key.
func KeyText(raw json.RawMessage) (text string, valid bool) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && plain(raw[1:len(raw)-1]):
		return string(raw[1 : len(raw)-1]), true
	case len(raw) > 0 && raw[0] == '"':
		// Escapes, or not one string at all.
		var t string
		if err := json.Unmarshal(raw, &t); err == nil {
			return t, true
		}
	case wire.PlainInteger(string(raw)):
		// As json.Number.Int64 would have it: an integer that fits in int64.
		if _, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return string(raw), true
		}
	}
	return "", false
}

// RegistryActivation is the message that activates a registry generation.
type RegistryActivation struct {
	Generation int64 `json:"generation"`
}

// ParseRegistryActivation decodes and validates a registry activation message.
func ParseRegistryActivation(b []byte) (RegistryActivation, error) {
	var a RegistryActivation
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("registry message: %w", err)
	}
	if a.Generation <= 0 {
		return a, fmt.Errorf("registry message: generation must be positive")
	}
	return a, nil
}
