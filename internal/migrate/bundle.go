package migrate

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	sqlfiles "github.com/synchro-sync/synchro/sql"
)

// loadOrder names the file of the bundle that lists its folders in install order.
const loadOrder = "load_order.txt"

type bundleFile struct {
	name string // path in the bundle, folder/file.sql
	body string
}

// bundle returns the function files of fsys in install order and their digest:
// the folders in the order load_order.txt lists them, the files of a folder in
// name order. It refuses a bundle whose tree and list disagree (a folder not
// listed, listed twice or missing, an empty folder, a file outside the listed
// folders), so that no file is left out or installed out of turn unnoticed.
func bundle(fsys fs.FS) ([]bundleFile, string, error) {
	folders, err := readLoadOrder(fsys)
	if err != nil {
		return nil, "", err
	}
	h := sha256.New()
	var files []bundleFile
	for _, dir := range folders {
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			return nil, "", fmt.Errorf("function bundle: folder %s of %s: %w", dir, loadOrder, err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			if e.IsDir() || path.Ext(e.Name()) != ".sql" {
				return nil, "", fmt.Errorf("function bundle: %s/%s is not a .sql file; a folder holds only its .sql files", dir, e.Name())
			}
			names = append(names, path.Join(dir, e.Name()))
		}
		if len(names) == 0 {
			return nil, "", fmt.Errorf("function bundle: folder %s holds no .sql file", dir)
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := fs.ReadFile(fsys, n)
			if err != nil {
				return nil, "", err
			}
			fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
			h.Write(b)
			files = append(files, bundleFile{name: n, body: string(b)})
		}
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

// readLoadOrder returns the folders load_order.txt lists (one a line; blank
// lines and # comments aside), checked against the folders at fsys's root.
func readLoadOrder(fsys fs.FS) ([]string, error) {
	b, err := fs.ReadFile(fsys, loadOrder)
	if err != nil {
		return nil, fmt.Errorf("function bundle: %w", err)
	}
	var folders []string
	listed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if listed[line] {
			return nil, fmt.Errorf("function bundle: %s lists folder %s twice", loadOrder, line)
		}
		listed[line] = true
		folders = append(folders, line)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("function bundle: %w", err)
	}
	present := map[string]bool{}
	for _, e := range entries {
		switch {
		case e.Name() == loadOrder:
		case !e.IsDir():
			return nil, fmt.Errorf("function bundle: %s is outside every folder; put it in the folder of its area", e.Name())
		case !listed[e.Name()]:
			return nil, fmt.Errorf("function bundle: folder %s is not listed in %s", e.Name(), loadOrder)
		default:
			present[e.Name()] = true
		}
	}
	for _, dir := range folders {
		if !present[dir] {
			return nil, fmt.Errorf("function bundle: %s lists folder %s, which does not exist", loadOrder, dir)
		}
	}
	return folders, nil
}

// BundleDigest is the digest of the function bundle built into this binary.
func BundleDigest() string {
	_, d, err := bundle(sqlfiles.Functions())
	if err != nil {
		panic(err)
	}
	return d
}
