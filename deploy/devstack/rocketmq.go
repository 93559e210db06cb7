package devstack

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// NamesrvMain is the name server's main class; its presence in the
	// command line is part of what makes a process our name server.
	NamesrvMain = "org.apache.rocketmq.namesrv.NamesrvStartup"
	// ProxyMain is the proxy's main class, likewise for the proxy.
	ProxyMain = "org.apache.rocketmq.proxy.ProxyStartup"
	// AdminMain is mqadmin's main class.
	AdminMain = "org.apache.rocketmq.tools.command.MQAdminStartup"
	// ClusterName is the cluster name in broker.conf.tmpl.
	ClusterName = "DefaultCluster"
	// BrokerName is the broker name in broker.conf.tmpl.
	BrokerName = "broker-a"
)

// RocketMQRuntime is a complete set of RocketMQ jars in the download cache.
type RocketMQRuntime struct {
	// Version is the RocketMQ version, e.g. "5.5.0".
	Version string
	// Lib is the directory of its jars (the JVMs' classpath is Lib/*).
	Lib string
}

// FindRocketMQ returns the cached RocketMQ runtime: cfg.RocketMQVersion or
// else the version named by <cache>/rocketmq/current-version, when its lib/
// is complete (marked .complete and holding the namesrv, broker, proxy and
// tools jars). It never downloads: deploy/local/stack.sh does (mvn).
func FindRocketMQ(cfg Config) (RocketMQRuntime, error) {
	base := filepath.Join(cfg.CacheDir, "rocketmq")
	v := cfg.RocketMQVersion
	if v == "" {
		b, err := os.ReadFile(filepath.Join(base, "current-version"))
		if err != nil {
			return RocketMQRuntime{}, fmt.Errorf("RocketMQ is not downloaded yet (no %s); run 'stack.sh up' first", filepath.Join(base, "current-version"))
		}
		v = strings.TrimSpace(string(b))
	}
	lib := filepath.Join(base, v, "lib")
	if _, err := os.Stat(filepath.Join(base, v, ".complete")); err != nil {
		return RocketMQRuntime{}, fmt.Errorf("RocketMQ %s is not downloaded completely in %s; run 'stack.sh up' first", v, lib)
	}
	for _, a := range []string{"namesrv", "broker", "proxy", "tools"} {
		if _, err := os.Stat(filepath.Join(lib, "rocketmq-"+a+"-"+v+".jar")); err != nil {
			return RocketMQRuntime{}, fmt.Errorf("RocketMQ %s in %s lacks rocketmq-%s-%s.jar; run 'stack.sh up' first", v, lib, a, v)
		}
	}
	return RocketMQRuntime{Version: v, Lib: lib}, nil
}

// JavaBinary returns cfg.Java when set and executable, else java on PATH.
func JavaBinary(cfg Config) (string, error) {
	if cfg.Java != "" {
		if st, err := os.Stat(cfg.Java); err == nil && st.Mode()&0o111 != 0 {
			return cfg.Java, nil
		}
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("java not found (JAVA_HOME or PATH; deploy/local/stack.sh up installs a JRE): %w", err)
	}
	return java, nil
}

// jvmArgv is the command line of a RocketMQ JVM: java, opts, the common
// options (home dir, logback role), the classpath and main.
func jvmArgv(cfg Config, home, java string, rt RocketMQRuntime, opts []string, role, main string, args ...string) []string {
	argv := append([]string{java}, opts...)
	argv = append(argv, "-Duser.home="+home, "-Drocketmq.home.dir="+home, "-XX:-OmitStackTraceInFastThrow")
	argv = append(argv, cfg.RMQJavaOpts...)
	argv = append(argv, "-Drmq.logback.configurationFile=rmq."+role+".logback.xml", "-cp", filepath.Join(rt.Lib, "*"), main)
	return append(argv, args...)
}

// MQAdmin returns the command line and the extra environment of RocketMQ's
// mqadmin with args against the stack's name server.
func MQAdmin(cfg Config, args []string) (argv, env []string, err error) {
	rt, err := FindRocketMQ(cfg)
	if err != nil {
		return nil, nil, err
	}
	java, err := JavaBinary(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(cfg.RMQHome(), 0o755); err != nil {
		return nil, nil, fmt.Errorf("mqadmin: %w", err)
	}
	argv = jvmArgv(cfg, cfg.RMQHome(), java, rt, strings.Fields(DefaultAdminJavaOpts), "tools", AdminMain, args...)
	return argv, []string{fmt.Sprintf("NAMESRV_ADDR=127.0.0.1:%d", cfg.NamesrvPort)}, nil
}

// rmqProcess is what the RocketMQ JVMs share.
type rmqProcess struct {
	Process
	cfg Config
	// home is the JVM's working directory, user.home and rocketmq.home.dir
	// (its logs are in home/logs/rocketmqlogs).
	home     string
	ports    []int
	ready    string        // the readiness line of the JVM's stdout
	timeout  time.Duration // how long Start waits for it
	logNames string        // the logs an error names
}

// Group implements Component: namesrv and proxy are purged together.
func (r *rmqProcess) Group() string { return "rocketmq" }

// Grace implements Component.
func (r *rmqProcess) Grace() time.Duration { return 0 }

// probe: every port accepts connections.
func (r *rmqProcess) probe(ctx context.Context) error {
	for _, port := range r.ports {
		if !portOpen(ctx, port) {
			return fmt.Errorf("%s: port %d closed", r.ComponentName, port)
		}
	}
	return nil
}

// Healthy implements Component: ours and its ports open.
func (r *rmqProcess) Healthy(ctx context.Context) error {
	if r.PID() == 0 {
		return fmt.Errorf("%s: not running (no live process of ours in %s)", r.ComponentName, r.File)
	}
	return r.probe(ctx)
}

// launch starts the JVM and waits for its readiness line and ports.
func (r *rmqProcess) launch(ctx context.Context, rt RocketMQRuntime, argv []string, what string) error {
	out := filepath.Join(r.cfg.LogDir(), r.ComponentName+".out")
	rotate(out)
	r.Log.Infof("%s", what)
	t0 := time.Now()
	pid, err := spawn(r.File, out, r.home, argv, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", r.ComponentName, err)
	}
	if err := os.WriteFile(filepath.Join(r.home, r.ComponentName+".version"), []byte(rt.Version+"\n"), 0o644); err != nil {
		return fmt.Errorf("%s: %w", r.ComponentName, err)
	}
	err = waitReady(ctx, r.Log, r.ComponentName, pid, r.timeout, out, r.logNames, func() error {
		if !fileContains(out, r.ready) {
			return fmt.Errorf("no %q in %s yet", r.ready, out)
		}
		return r.probe(ctx)
	})
	if err != nil {
		return err
	}
	r.Log.Infof("%s: ready, pid %d (%s)", r.ComponentName, pid, since(t0))
	return nil
}

// runtime finds the jars and java, and prepares the directories.
func (r *rmqProcess) runtime() (RocketMQRuntime, string, error) {
	rt, err := FindRocketMQ(r.cfg)
	if err != nil {
		return rt, "", fmt.Errorf("%s: %w", r.ComponentName, err)
	}
	java, err := JavaBinary(r.cfg)
	if err != nil {
		return rt, "", fmt.Errorf("%s: %w", r.ComponentName, err)
	}
	for _, d := range []string{filepath.Join(r.home, "conf"), filepath.Join(r.home, "store"), r.cfg.LogDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return rt, "", fmt.Errorf("%s: %w", r.ComponentName, err)
		}
	}
	return rt, java, nil
}

// Purge implements Component: the JVM's home (store, name server kv,
// configs, logs), shared by namesrv and proxy.
func (r *rmqProcess) Purge() error { return removeAll(r.home) }

// version is the RocketMQ version the component last started with.
func (r *rmqProcess) version() string {
	b, _ := os.ReadFile(filepath.Join(r.home, r.ComponentName+".version"))
	return strings.TrimSpace(string(b))
}

// NameServer is RocketMQ's name server (NamesrvStartup), a JVM on
// 127.0.0.1:NamesrvPort running in <state>/rocketmq.
type NameServer struct{ rmqProcess }

// NewNameServer returns the name server component of cfg.
func NewNameServer(cfg Config, log *Logger) *NameServer {
	return &NameServer{rmqProcess{
		cfg:      cfg,
		home:     cfg.RMQHome(),
		ports:    []int{cfg.NamesrvPort},
		ready:    "The Name Server boot success",
		timeout:  60 * time.Second,
		logNames: filepath.Join(cfg.LogDir(), "namesrv.out") + " and " + filepath.Join(cfg.RMQLogs(), "namesrv.log"),
		Process: Process{
			ComponentName: "namesrv",
			File:          filepath.Join(cfg.RunDir(), "namesrv.pid"),
			Owner:         Owner{Dir: cfg.RMQHome(), Needle: NamesrvMain},
			AdoptPort:     cfg.NamesrvPort,
			StopSignal:    syscall.SIGTERM,
			StopTimeout:   30 * time.Second,
			Log:           log,
		},
	}}
}

// DependsOn implements Component: the name server needs nothing.
func (n *NameServer) DependsOn() []string { return nil }

// Start implements Component.
func (n *NameServer) Start(ctx context.Context) error {
	rt, java, err := n.runtime()
	if err != nil {
		return err
	}
	conf := filepath.Join(n.cfg.RMQHome(), "conf", "namesrv.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listenPort=%d\nbindAddress=127.0.0.1\n", n.cfg.NamesrvPort), 0o644); err != nil {
		return fmt.Errorf("namesrv: %w", err)
	}
	if err := ensurePortsFree(ctx, "namesrv", n.cfg.NamesrvPort); err != nil {
		return err
	}
	argv := jvmArgv(n.cfg, n.home, java, rt, n.cfg.NamesrvJavaOpts, "namesrv", NamesrvMain, "-c", conf)
	return n.launch(ctx, rt, argv, fmt.Sprintf("namesrv: starting RocketMQ %s name server on 127.0.0.1:%d (logs: %s)",
		rt.Version, n.cfg.NamesrvPort, n.logNames))
}

// Status implements Component.
func (n *NameServer) Status(context.Context) StatusInfo {
	info := StatusInfo{Ports: strconv.Itoa(n.cfg.NamesrvPort)}
	if pid := n.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	ver := (&rmqProcess{cfg: n.cfg, home: n.home, Process: Process{ComponentName: "proxy"}}).version()
	if ver == "" {
		ver = "?"
	}
	info.Detail = "RocketMQ " + ver
	return info
}

// Proxy is RocketMQ's proxy in LOCAL mode with the broker broker-a
// embedded (ProxyStartup -pm local), one JVM serving gRPC on ProxyPort,
// remoting on RemotingPort and the broker on BrokerPort (and BrokerPort-2,
// BrokerPort+1, BrokerMetricsPort). Its configs are rendered from
// deploy/local/broker.conf.tmpl and rmq-proxy.json.tmpl on every start.
type Proxy struct{ rmqProcess }

// NewProxy returns the proxy component of cfg.
func NewProxy(cfg Config, log *Logger) *Proxy {
	return &Proxy{rmqProcess{
		cfg:     cfg,
		home:    cfg.RMQHome(),
		ports:   []int{cfg.ProxyPort, cfg.BrokerPort, cfg.RemotingPort},
		ready:   "rocketmq-proxy startup successfully",
		timeout: 180 * time.Second,
		logNames: filepath.Join(cfg.LogDir(), "proxy.out") + ", " + filepath.Join(cfg.RMQLogs(), "proxy.log") + " and " +
			filepath.Join(cfg.RMQLogs(), "broker.log"),
		Process: Process{
			ComponentName: "proxy",
			File:          filepath.Join(cfg.RunDir(), "proxy.pid"),
			Owner:         Owner{Dir: cfg.RMQHome(), Needle: ProxyMain},
			AdoptPort:     cfg.ProxyPort,
			StopSignal:    syscall.SIGTERM,
			// The embedded broker takes 13-19 s to shut down.
			StopTimeout: 90 * time.Second,
			Log:         log,
		},
	}}
}

// DependsOn implements Component: the broker registers with the name
// server.
func (p *Proxy) DependsOn() []string { return []string{"namesrv"} }

// Grace implements Component: a proxy whose ports are not open yet may
// still be starting (another `up` was interrupted).
func (p *Proxy) Grace() time.Duration { return 60 * time.Second }

// render replaces every @KEY@ of the template file by its value and writes
// the result to out.
func render(tmpl, out string, kv map[string]string) error {
	b, err := os.ReadFile(tmpl)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	text := string(b)
	for k, v := range kv {
		text = strings.ReplaceAll(text, "@"+k+"@", v)
	}
	text = strings.TrimRight(text, "\n") + "\n" // as bash's $(<file) and printf '%s\n' did
	if err := os.WriteFile(out+".tmp", []byte(text), 0o644); err != nil {
		return fmt.Errorf("render %s: %w", out, err)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("render %s: %w", out, err)
	}
	return nil
}

// Start implements Component.
func (p *Proxy) Start(ctx context.Context) error {
	if p.cfg.RepoDir == "" {
		return errors.New("proxy: no repository dir: the config templates are in <repo>/deploy/local")
	}
	rt, java, err := p.runtime()
	if err != nil {
		return err
	}
	c := p.cfg
	tmpl := filepath.Join(c.RepoDir, "deploy", "local")
	conf := filepath.Join(c.RMQHome(), "conf")
	if err := render(filepath.Join(tmpl, "broker.conf.tmpl"), filepath.Join(conf, "broker.conf"), map[string]string{
		"BROKER_NAME": BrokerName, "NAMESRV_PORT": strconv.Itoa(c.NamesrvPort), "BROKER_PORT": strconv.Itoa(c.BrokerPort),
		"STORE_DIR": filepath.Join(c.RMQHome(), "store"), "METRICS_PORT": strconv.Itoa(c.BrokerMetricsPort),
	}); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if err := render(filepath.Join(tmpl, "rmq-proxy.json.tmpl"), filepath.Join(conf, "rmq-proxy.json"), map[string]string{
		"NAMESRV_PORT": strconv.Itoa(c.NamesrvPort), "PROXY_PORT": strconv.Itoa(c.ProxyPort), "REMOTING_PORT": strconv.Itoa(c.RemotingPort),
	}); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	// The broker also listens on listenPort-2 (fast remoting) and listenPort+1 (HA, all interfaces).
	if err := ensurePortsFree(ctx, "proxy/broker", c.ProxyPort, c.RemotingPort, c.BrokerPort, c.BrokerPort-2, c.BrokerPort+1, c.BrokerMetricsPort); err != nil {
		return err
	}
	argv := jvmArgv(c, p.home, java, rt, c.ProxyJavaOpts, "proxy", ProxyMain, "-pm", "local",
		"-bc", filepath.Join(conf, "broker.conf"), "-pc", filepath.Join(conf, "rmq-proxy.json"), "-n", fmt.Sprintf("127.0.0.1:%d", c.NamesrvPort))
	return p.launch(ctx, rt, argv, fmt.Sprintf("proxy: starting RocketMQ %s proxy (LOCAL mode, embedded broker %s) gRPC 127.0.0.1:%d, remoting %d, broker %d (logs: %s, %s/{proxy,broker}.log)",
		rt.Version, BrokerName, c.ProxyPort, c.RemotingPort, c.BrokerPort, filepath.Join(c.LogDir(), "proxy.out"), c.RMQLogs()))
}

// Status implements Component.
func (p *Proxy) Status(context.Context) StatusInfo {
	info := StatusInfo{
		Ports:  fmt.Sprintf("grpc %d,remoting %d,broker %d", p.cfg.ProxyPort, p.cfg.RemotingPort, p.cfg.BrokerPort),
		Detail: "LOCAL mode, embedded " + BrokerName,
	}
	if pid := p.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	return info
}

// RunningVersion is the RocketMQ version the proxy last started with ("" if
// unknown).
func (p *Proxy) RunningVersion() string { return p.version() }

// BrokerRegistered asks the name server (GET_BROKER_CLUSTER_INFO over the
// remoting protocol) whether broker-a is registered at
// 127.0.0.1:BrokerPort. The answer's JSON has non-string map keys
// (fastjson), so the body is searched rather than decoded.
func BrokerRegistered(ctx context.Context, cfg Config) (bool, error) {
	return brokerRegistered(ctx, cfg.NamesrvPort, BrokerName, cfg.BrokerPort)
}

// brokerRegistered asks the name server on namesrvPort whether broker
// name is registered at 127.0.0.1:brokerPort.
func brokerRegistered(ctx context.Context, namesrvPort int, name string, brokerPort int) (bool, error) {
	body, err := remotingCall(ctx, fmt.Sprintf("127.0.0.1:%d", namesrvPort), 106)
	if err != nil {
		return false, err
	}
	s := string(body)
	return strings.Contains(s, `"`+name+`"`) && strings.Contains(s, fmt.Sprintf(`"127.0.0.1:%d"`, brokerPort)), nil
}

// remotingCall sends one request without fields to addr and returns the
// body of a successful response; the exchange is bounded by 3 s and ctx.
func remotingCall(ctx context.Context, addr string, code int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("name server %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	hdr, err := json.Marshal(map[string]any{"code": code, "language": "GO", "version": 473, "opaque": 1, "flag": 0, "extFields": map[string]string{}})
	if err != nil {
		return nil, fmt.Errorf("name server %s: %w", addr, err)
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(hdr)))
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(hdr)))
	if _, err := conn.Write(append(frame, hdr...)); err != nil {
		return nil, fmt.Errorf("name server %s: request %d: %w", addr, code, err)
	}
	for {
		var prefix [8]byte
		if _, err := io.ReadFull(conn, prefix[:]); err != nil {
			return nil, fmt.Errorf("name server %s: request %d: %w", addr, code, err)
		}
		length, hdrLen := binary.BigEndian.Uint32(prefix[0:4]), binary.BigEndian.Uint32(prefix[4:8])&0xFFFFFF
		if length < 4 || length > 16<<20 || hdrLen > length-4 {
			return nil, fmt.Errorf("name server %s: bad frame lengths %d/%d", addr, length, hdrLen)
		}
		rest := make([]byte, length-4)
		if _, err := io.ReadFull(conn, rest); err != nil {
			return nil, fmt.Errorf("name server %s: request %d: %w", addr, code, err)
		}
		var h struct {
			Code   int    `json:"code"`
			Flag   int    `json:"flag"`
			Opaque int    `json:"opaque"`
			Remark string `json:"remark"`
		}
		if err := json.Unmarshal(rest[:hdrLen], &h); err != nil {
			return nil, fmt.Errorf("name server %s: decode header: %w", addr, err)
		}
		if h.Flag&1 == 0 || h.Opaque != 1 {
			continue // not the answer to our request
		}
		if h.Code != 0 {
			return nil, fmt.Errorf("name server %s: request %d answered %d: %s", addr, code, h.Code, h.Remark)
		}
		return rest[hdrLen:], nil
	}
}
