package symbols

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
)

// Line is a source position.
type Line struct {
	File   string // full path as the line table names it
	Line   int
	Column int    // 0 when unknown
	Addr   uint64 // start of the line-table row the position came from (link-time)
	End    uint64 // end of the address range of that line (gdb's sal.end)
	Stmt   bool   // the row is a recommended breakpoint location
}

// lineEntry is one entry of a per-file line table, as gdb keeps them: sorted by address, a
// line of 0 marking the end of a sequence or a switch to another file.
type lineEntry struct {
	addr        uint64
	line        int32
	col         int32
	stmt        bool
	prologueEnd bool
}

// lineFile is the line table of one source file within a compile unit.
type lineFile struct {
	name    string
	entries []lineEntry
}

// lineTable is a compile unit's line program decoded into per-file tables (gdb's subfiles).
type lineTable struct {
	fileByIndex []string
	files       []*lineFile // lookup order: the unit's primary file first
	byName      map[string]*lineFile
}

// lineTable decodes the unit's line program on first use.
func (cu *compUnit) lineTable() (*lineTable, error) {
	cu.lineOnce.Do(func() {
		defer func() {
			if r := recover(); r != nil {
				cu.lineErr = fmt.Errorf("symbols: line table of %s: malformed: %v", cu.Name, r)
			}
		}()
		cu.lines, cu.lineErr = cu.bin.decodeLines(cu)
	})
	return cu.lines, cu.lineErr
}

// decodeLines replays the line program the way gdb records it: entries go to the table of the
// current file, a file switch ends the previous file's run with a line-0 marker, repeated
// rows for one line are kept unless discriminators say they are one statement, and sequences
// at address 0 (discarded code) are dropped.
func (b *Binary) decodeLines(cu *compUnit) (*lineTable, error) {
	lt := &lineTable{byName: map[string]*lineFile{}}
	if _, ok := cu.entry.Val(dwarf.AttrStmtList).(int64); !ok {
		return lt, nil
	}
	lr, err := b.dw.LineReader(cu.entry)
	if err != nil {
		return nil, fmt.Errorf("symbols: line table of %s: %w", cu.Name, err)
	}
	if lr == nil {
		return lt, nil
	}
	for _, f := range lr.Files() {
		name := ""
		if f != nil {
			name = cu.absFileName(f.Name)
		}
		lt.fileByIndex = append(lt.fileByIndex, name)
	}
	var created []*lineFile
	sub := func(name string) *lineFile {
		if f, ok := lt.byName[name]; ok {
			return f
		}
		f := &lineFile{name: name}
		lt.byName[name] = f
		created = append(created, f)
		return f
	}
	primary := sub(cu.absFileName(cu.Name))

	record := func(f *lineFile, line int32, e lineEntry) {
		if line == 0 {
			var last *int32
			for len(f.entries) > 0 {
				l := f.entries[len(f.entries)-1]
				v := l.line
				last = &v
				if l.addr != e.addr {
					break
				}
				f.entries = f.entries[:len(f.entries)-1]
			}
			if last == nil || *last == 0 {
				return
			}
		}
		e.line = line
		f.entries = append(f.entries, e)
	}

	var (
		row          dwarf.LineEntry
		lastFile     *lineFile
		lastLine     int32
		lastAddr     uint64
		stmtAtAddr   bool
		recording          = true
		seqStart           = true
		discrimLine  int32 = -1
		hasDiscrim   bool
		zeroOK       = b.sectionAtZero()
		haveLastAddr bool
	)
	for {
		err := lr.Next(&row)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("symbols: line table of %s: %w", cu.Name, err)
		}
		if seqStart {
			recording = row.Address != 0 || zeroOK
			seqStart = false
		}
		name := ""
		if row.File != nil {
			name = cu.absFileName(row.File.Name)
		}
		cur := sub(name)
		line := int32(row.Line)
		if line != discrimLine {
			discrimLine, hasDiscrim = line, false
		}
		if row.Discriminator != 0 {
			hasDiscrim = true
		}
		if row.OpIndex == 0 || row.EndSequence {
			if recording {
				fileChanged := lastFile != cur
				ignore := (fileChanged && !row.EndSequence && haveLastAddr && lastAddr == row.Address &&
					!row.IsStmt && stmtAtAddr) || (!row.EndSequence && line == 0)
				if (fileChanged && !ignore) || row.EndSequence {
					if lastFile != nil {
						record(lastFile, 0, lineEntry{addr: row.Address, stmt: true})
					}
				}
				if !row.EndSequence && !ignore {
					if fileChanged || line != lastLine || !hasDiscrim {
						record(cur, line, lineEntry{addr: row.Address, col: int32(row.Column),
							stmt: row.IsStmt, prologueEnd: row.PrologueEnd})
					}
					lastFile, lastLine = cur, line
				}
			}
		}
		if !haveLastAddr || lastAddr != row.Address {
			stmtAtAddr = false
			lastAddr, haveLastAddr = row.Address, true
		}
		stmtAtAddr = stmtAtAddr || row.IsStmt
		if row.EndSequence {
			seqStart = true
			lastFile, lastLine = nil, 0
			haveLastAddr = false
		}
	}
	for _, f := range created {
		sort.SliceStable(f.entries, func(i, j int) bool {
			a, b := f.entries[i], f.entries[j]
			if a.addr == b.addr && (a.line == 0) != (b.line == 0) {
				return a.line == 0
			}
			return a.addr < b.addr
		})
	}
	lt.files = append(lt.files, primary)
	for i := len(created) - 1; i >= 0; i-- {
		if created[i] != primary {
			lt.files = append(lt.files, created[i])
		}
	}
	return lt, nil
}

// sectionAtZero reports whether an allocated section starts at address 0, making line-table
// sequences at 0 real code rather than discarded functions.
func (b *Binary) sectionAtZero() bool {
	for _, s := range b.file.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Addr == 0 && s.Size > 0 {
			return true
		}
	}
	return false
}

// find is gdb's find_pc_sect_line within one unit: the best entry at or below pc across the
// unit's files, preferring a statement entry at the same address, and the end of its range.
func (lt *lineTable) find(pc uint64) (best *lineEntry, bestFile *lineFile, end uint64) {
	var alt *lineEntry
	var bestEnd uint64
	for _, f := range lt.files {
		items := f.entries
		if len(items) == 0 {
			continue
		}
		if items[0].addr > pc && (alt == nil || items[0].addr < alt.addr) {
			alt = &items[0]
		}
		i := sort.Search(len(items), func(k int) bool { return items[k].addr > pc })
		item := i
		var prev *lineEntry
		if i > 0 {
			prev = &items[i-1]
			for item < len(items) && prev.line == items[item].line && !items[item].stmt {
				item++
			}
		}
		if prev != nil && prev.line != 0 && (best == nil || prev.addr > best.addr) {
			best, bestFile = prev, f
			if !best.stmt {
				tmp := i - 1
				for tmp > 0 && items[tmp-1].addr == items[tmp].addr && items[tmp-1].line != 0 && !items[tmp].stmt {
					tmp--
				}
				if items[tmp].stmt {
					best = &items[tmp]
				}
			}
			if bestEnd <= best.addr {
				bestEnd = 0
			}
		}
		if best != nil && item < len(items) && items[item].addr > best.addr && (bestEnd == 0 || bestEnd > items[item].addr) {
			bestEnd = items[item].addr
		}
	}
	if best == nil {
		return nil, nil, 0
	}
	switch {
	case bestEnd != 0 && (alt == nil || bestEnd < alt.addr):
		end = bestEnd
	case alt != nil:
		end = alt.addr
	}
	return best, bestFile, end
}

// LineForPC returns the source position of a link-time pc as gdb reports it for the innermost
// frame (for a caller frame pass the return address minus one). ok is false when the pc has
// no line information.
func (b *Binary) LineForPC(pc uint64) (Line, bool) {
	if b.dw == nil {
		return Line{}, false
	}
	cu := b.cuForPC(pc)
	if cu == nil {
		return Line{}, false
	}
	lt, err := cu.lineTable()
	if err != nil || lt == nil {
		return Line{}, false
	}
	e, f, end := lt.find(pc)
	if e == nil {
		return Line{}, false
	}
	if end == 0 {
		end = pc + 1
		if fn := b.funcForPC(pc); fn != nil {
			end = fn.High
		}
	}
	return Line{File: f.name, Line: int(e.line), Column: int(e.col), Addr: e.addr, End: end, Stmt: e.stmt}, true
}

// IsStatementStart reports whether pc begins a source line (gdb stops a step there).
func (b *Binary) IsStatementStart(pc uint64) bool {
	l, ok := b.LineForPC(pc)
	return ok && l.Addr == pc
}

// SourceFiles returns every source file named by a line table.
func (b *Binary) SourceFiles() []string {
	out := make([]string, 0, len(b.files))
	for f := range b.files {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// matchFiles returns the indexed file names that a user-supplied path designates: the exact
// path, or for a relative path every file whose name ends with it on a directory boundary.
func (b *Binary) matchFiles(path string) []string {
	clean := filepath.Clean(path)
	if _, ok := b.files[clean]; ok {
		return []string{clean}
	}
	var out []string
	if filepath.IsAbs(clean) {
		real, err := filepath.EvalSymlinks(clean)
		for name := range b.files {
			if err == nil {
				if r2, err2 := filepath.EvalSymlinks(name); err2 == nil && r2 == real {
					out = append(out, name)
				}
			}
		}
		sort.Strings(out)
		return out
	}
	for name := range b.files {
		if strings.HasSuffix(name, "/"+clean) || name == clean {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// absFileName is the name of a file of the unit as its build saw it: a relative name (a source
// compiled as `cc -c src/f.c`, or a header found through a relative include directory) is
// joined to the unit's compilation directory, so that an editor's absolute path finds it and
// frames name a file the editor can open.
func (cu *compUnit) absFileName(name string) string {
	if name != "" && !filepath.IsAbs(name) && cu.CompDir != "" {
		return filepath.Join(cu.CompDir, name)
	}
	return name
}

// ErrNoCode is returned when a source line or function has no code to stop at.
var ErrNoCode = errors.New("no code at that location")
