package migrate

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	sqlfiles "github.com/synchro-sync/synchro/sql"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

// TestBundleFollowsLoadOrder: the folders install in the listed order, not in
// name order, and the files of a folder in name order.
func TestBundleFollowsLoadOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"load_order.txt":     file("# comment\nzeta\n\nalpha\n"),
		"alpha/b.sql":        file("b"),
		"alpha/a.sql":        file("a"),
		"zeta/grants.sql":    file("g"),
		"zeta/functions.sql": file("f"),
	}
	files, digest, err := bundle(fsys)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	want := []string{"zeta/functions.sql", "zeta/grants.sql", "alpha/a.sql", "alpha/b.sql"}
	if !slices.Equal(names, want) {
		t.Fatalf("install order %v, want %v", names, want)
	}
	fsys["load_order.txt"] = file("alpha\nzeta\n")
	_, other, err := bundle(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if other == digest {
		t.Fatal("the digest does not change with the load order")
	}
}

// TestBundleRefusesStrayFiles: a bundle whose tree and load_order.txt disagree
// is refused, naming what is wrong, instead of installing without a file.
func TestBundleRefusesStrayFiles(t *testing.T) {
	for name, tc := range map[string]struct {
		fsys fstest.MapFS
		want string
	}{
		"no list":         {fstest.MapFS{"a/x.sql": file("x")}, "load_order.txt"},
		"unlisted folder": {fstest.MapFS{"load_order.txt": file("a\n"), "a/x.sql": file("x"), "b/y.sql": file("y")}, "folder b is not listed"},
		"missing folder":  {fstest.MapFS{"load_order.txt": file("a\nb\n"), "a/x.sql": file("x")}, "lists folder b, which does not exist"},
		"listed twice":    {fstest.MapFS{"load_order.txt": file("a\na\n"), "a/x.sql": file("x")}, "lists folder a twice"},
		"root file":       {fstest.MapFS{"load_order.txt": file("a\n"), "a/x.sql": file("x"), "y.sql": file("y")}, "y.sql is outside every folder"},
		"nested folder":   {fstest.MapFS{"load_order.txt": file("a\n"), "a/x.sql": file("x"), "a/b/y.sql": file("y")}, "a/b is not a .sql file"},
		"other file":      {fstest.MapFS{"load_order.txt": file("a\n"), "a/x.sql": file("x"), "a/notes.txt": file("n")}, "a/notes.txt is not a .sql file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := bundle(tc.fsys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestBundleGrantsLast: the built-in bundle loads, and its privileges folder,
// which grants on and revokes from every object before it, installs last.
func TestBundleGrantsLast(t *testing.T) {
	files, _, err := bundle(sqlfiles.Functions())
	if err != nil {
		t.Fatal(err)
	}
	last := files[len(files)-1].name
	if !strings.HasPrefix(last, "privileges/") {
		t.Fatalf("the bundle ends with %s, not with the privileges folder", last)
	}
	for _, f := range files {
		if strings.Contains(f.name, "zz_") {
			t.Errorf("%s: the load order is load_order.txt's, not a name prefix's", f.name)
		}
	}
}
