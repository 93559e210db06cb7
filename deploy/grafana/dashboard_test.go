package grafana_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-dev/seckill/adapters/testkit/promnames"
)

// dashboardFile is the dashboard under test.
const dashboardFile = "seckill-overview.json"

// dashboard is the part of the dashboard JSON that the tests check.
type dashboard struct {
	UID           string     `json:"uid"`
	Title         string     `json:"title"`
	SchemaVersion int        `json:"schemaVersion"`
	Tags          []string   `json:"tags"`
	Links         []any      `json:"links"`
	Panels        []panel    `json:"panels"`
	Templating    templating `json:"templating"`
}

// panel is a panel, a row among them.
type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// datasource is a panel's or a query's data source reference.
type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// templating holds the template variables.
type templating struct {
	List []struct {
		Name       string          `json:"name"`
		Type       string          `json:"type"`
		Query      json.RawMessage `json:"query"`
		Definition string          `json:"definition"`
		Datasource *datasource     `json:"datasource"`
	} `json:"list"`
}

// readDashboard parses the dashboard.
func readDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// allPanels returns the panels and rows of d, those of collapsed rows
// included.
func allPanels(d dashboard) []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// wantDatasource is the data source of every panel and query: the
// dashboard's datasource variable, never a fixed instance.
var wantDatasource = datasource{Type: "prometheus", UID: "${datasource}"}

func TestDashboardHeader(t *testing.T) {
	d := readDashboard(t)
	if d.UID != "seckill-sale-overview" {
		t.Errorf("uid = %q", d.UID)
	}
	if d.Title != "seckill: sale overview" {
		t.Errorf("title = %q", d.Title)
	}
	if d.SchemaVersion != 39 {
		t.Errorf("schemaVersion = %d, want 39", d.SchemaVersion)
	}
	if !slices.Equal(d.Tags, []string{"seckill"}) {
		t.Errorf("tags = %q", d.Tags)
	}
	if len(d.Links) != 0 {
		t.Errorf("the dashboard has %d links, want none", len(d.Links))
	}
	var rows []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			rows = append(rows, p.Title)
		}
	}
	if want := []string{"Entry", "Backlog", "Consumers", "Broker", "PostgreSQL", "Stock & dead letters"}; !slices.Equal(rows, want) {
		t.Errorf("rows = %q, want %q", rows, want)
	}
}

func TestTemplateVariables(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]int{}
	for k, v := range d.Templating.List {
		vars[v.Name] = k
	}
	k, ok := vars["datasource"]
	if !ok {
		t.Fatal("no datasource variable")
	}
	if v := d.Templating.List[k]; v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("datasource variable: type %q, query %s; want a Prometheus datasource variable", v.Type, v.Query)
	}
	k, ok = vars["instance"]
	if !ok {
		t.Fatal("no instance variable")
	}
	v := d.Templating.List[k]
	if v.Type != "query" || v.Datasource == nil || *v.Datasource != wantDatasource {
		t.Errorf("instance variable: type %q, datasource %+v", v.Type, v.Datasource)
	}
	// The query is a string in older schemas and an object of the
	// Prometheus variable editor in newer ones.
	var query string
	if err := json.Unmarshal(v.Query, &query); err != nil {
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("instance variable query %s: %v", v.Query, err)
		}
		query = q.Query
	}
	const want = "label_values(seckill_build_info, instance)"
	if query != want || v.Definition != want {
		t.Errorf("instance variable: query %q, definition %q, want %q", query, v.Definition, want)
	}
	m := regexp.MustCompile(`^label_values\(([^,]+),`).FindStringSubmatch(query)
	if m == nil {
		t.Fatalf("instance variable query %q is not label_values(metric, label)", query)
	}
	checkDefined(t, "the instance variable", m[1])
}

func TestPanels(t *testing.T) {
	d := readDashboard(t)
	ids := map[int]string{}
	for _, p := range allPanels(d) {
		if p.ID <= 0 {
			t.Errorf("panel %q has no id", p.Title)
		} else if other, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", other, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Title == "" {
			t.Errorf("panel %d has no title", p.ID)
		}
		if g := p.GridPos; g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit the 24 columns", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || *p.Datasource != wantDatasource {
			t.Errorf("panel %q: datasource %+v, want %+v", p.Title, p.Datasource, wantDatasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: missing or repeated refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || *tg.Datasource != wantDatasource {
				t.Errorf("panel %q target %s: datasource %+v, want %+v", p.Title, tg.RefID, tg.Datasource, wantDatasource)
			}
			names, err := promnames.MetricNames(tg.Expr)
			if err != nil {
				t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("panel %q target %s: %q selects no metric", p.Title, tg.RefID, tg.Expr)
			}
			for _, n := range names {
				checkDefined(t, "panel "+p.Title, n)
			}
		}
	}
}

// TestNoOverlap checks that no two panels of the top level cover the same
// cell of the grid.
func TestNoOverlap(t *testing.T) {
	d := readDashboard(t)
	owner := map[[2]int]string{}
	for _, p := range d.Panels {
		g := p.GridPos
		for y := g.Y; y < g.Y+g.H; y++ {
			for x := g.X; x < g.X+g.W; x++ {
				if other, taken := owner[[2]int{x, y}]; taken {
					t.Fatalf("panels %q and %q overlap at column %d, row %d", other, p.Title, x, y)
				}
				owner[[2]int{x, y}] = p.Title
			}
		}
	}
}

// TestDashboardExprs checks that promnames.DashboardExprs, which other
// tests use to compare the dashboard with a running service's /metrics,
// reads every query.
func TestDashboardExprs(t *testing.T) {
	exprs, err := promnames.DashboardExprs(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, p := range allPanels(readDashboard(t)) {
		for _, tg := range p.Targets {
			want = append(want, tg.Expr)
		}
	}
	if !slices.Equal(exprs, want) {
		t.Errorf("DashboardExprs = %q\nwant %q", exprs, want)
	}
}

// sourceNames holds the string literals of the adapters' non-test Go files
// that could name a metric; read once by definedNames.
var sourceNames map[string]bool

// definedNames returns the metric-like string literals of the adapters'
// code, where every collector of the service is declared.
func definedNames(t *testing.T) map[string]bool {
	t.Helper()
	if sourceNames != nil {
		return sourceNames
	}
	literal := regexp.MustCompile(`"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	names := map[string]bool{}
	root := filepath.Join("..", "..", "adapters")
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && e.Name() == "testkit" {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sourceNames = names
	return names
}

// checkDefined fails the test unless the adapters' code names the metric
// name, or the histogram or summary family it is a series of. The check is
// textual; a running service's /metrics (promnames.ExportedNames) is the
// complete one.
func checkDefined(t *testing.T, where, name string) {
	t.Helper()
	defined := definedNames(t)
	if defined[name] {
		return
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && defined[base] {
			return
		}
	}
	t.Errorf("%s uses %s, which no collector of adapters/ names", where, name)
}
