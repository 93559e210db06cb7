package devstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

const (
	// BrokerMain is a standalone broker's main class.
	BrokerMain = "org.apache.rocketmq.broker.BrokerStartup"
	// clusterBrokerA and clusterBrokerB are the brokers of the RocketMQ
	// cluster mode.
	clusterBrokerA, clusterBrokerB = "broker-a", "broker-b"
)

// Broker is a standalone RocketMQ broker (BrokerStartup) of the cluster
// mode: a JVM in its own home <state>/<name> (working directory, store,
// logs), configured by deploy/local/broker.conf.tmpl (the settings of the
// local mode's embedded broker) with its own brokerName, listenPort, store
// and exporter port.
type Broker struct {
	rmqProcess
	port, metricsPort int
}

// NewBroker returns the broker name of cfg's stack on 127.0.0.1:port
// (also port-2 and port+1) with its Prometheus exporter on metricsPort.
func NewBroker(cfg Config, log *Logger, name string, port, metricsPort int) *Broker {
	home := filepath.Join(cfg.StateDir, name)
	return &Broker{port: port, metricsPort: metricsPort, rmqProcess: rmqProcess{
		cfg:     cfg,
		home:    home,
		ports:   []int{port},
		ready:   "boot success",
		timeout: 180 * time.Second,
		logNames: filepath.Join(cfg.LogDir(), name+".out") + " and " +
			filepath.Join(home, "logs", "rocketmqlogs", "broker.log"),
		Process: Process{
			ComponentName: name,
			File:          filepath.Join(cfg.RunDir(), name+".pid"),
			// The home tells broker-a from broker-b; the main class a broker from anything else there.
			Owner:       Owner{Dir: home, Needle: BrokerMain},
			AdoptPort:   port,
			StopSignal:  syscall.SIGTERM,
			StopTimeout: 90 * time.Second,
			Log:         log,
		},
	}}
}

// DependsOn implements Component: a broker registers with the name server.
func (b *Broker) DependsOn() []string { return []string{"namesrv"} }

// Grace implements Component: a broker whose port is not open yet may still
// be starting.
func (b *Broker) Grace() time.Duration { return 60 * time.Second }

// Start implements Component.
func (b *Broker) Start(ctx context.Context) error {
	if b.cfg.RepoDir == "" {
		return fmt.Errorf("%s: no repository dir: the config templates are in <repo>/deploy/local", b.Name())
	}
	rt, java, err := b.runtime()
	if err != nil {
		return err
	}
	conf := filepath.Join(b.home, "conf", "broker.conf")
	if err := render(filepath.Join(b.cfg.RepoDir, "deploy", "local", "broker.conf.tmpl"), conf, map[string]string{
		"BROKER_NAME": b.Name(), "NAMESRV_PORT": strconv.Itoa(b.cfg.NamesrvPort), "BROKER_PORT": strconv.Itoa(b.port),
		"STORE_DIR": filepath.Join(b.home, "store"), "METRICS_PORT": strconv.Itoa(b.metricsPort),
	}); err != nil {
		return fmt.Errorf("%s: %w", b.Name(), err)
	}
	if err := ensurePortsFree(ctx, b.Name(), b.port, b.port-2, b.port+1, b.metricsPort); err != nil {
		return err
	}
	argv := jvmArgv(b.cfg, b.home, java, rt, b.cfg.BrokerJavaOpts, "broker", BrokerMain, "-c", conf)
	return b.launch(ctx, rt, argv, fmt.Sprintf("%s: starting RocketMQ %s broker on 127.0.0.1:%d (name server %d; logs: %s)",
		b.Name(), rt.Version, b.port, b.cfg.NamesrvPort, b.logNames))
}

// Status implements Component.
func (b *Broker) Status(context.Context) StatusInfo {
	info := StatusInfo{
		Ports:  fmt.Sprintf("broker %d,metrics %d", b.port, b.metricsPort),
		Detail: "standalone broker, home " + b.home,
	}
	if pid := b.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	return info
}

// Addr is the broker's remoting address.
func (b *Broker) Addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// ClusterProxy is RocketMQ's proxy in CLUSTER mode (ProxyStartup -pm
// cluster): no broker inside, it finds the brokers through the name server
// and routes gRPC clients' requests to them, configured by
// deploy/local/rmq-proxy-cluster.json.tmpl (route refresh 2 s, send latency
// fault isolation and its detector on).
type ClusterProxy struct {
	rmqProcess
	brokers []brokerRef
}

// NewClusterProxy returns the CLUSTER-mode proxy of cfg's stack (gRPC
// ProxyPort, remoting RemotingPort) in <state>/rocketmq beside the name
// server, in front of brokers.
func NewClusterProxy(cfg Config, log *Logger, brokers ...*Broker) *ClusterProxy {
	var refs []brokerRef
	for _, b := range brokers {
		refs = append(refs, brokerRef{b.Name(), b.port})
	}
	return &ClusterProxy{brokers: refs, rmqProcess: rmqProcess{
		cfg:      cfg,
		home:     cfg.RMQHome(),
		ports:    []int{cfg.ProxyPort, cfg.RemotingPort},
		ready:    "rocketmq-proxy startup successfully",
		timeout:  180 * time.Second,
		logNames: filepath.Join(cfg.LogDir(), "proxy.out") + " and " + filepath.Join(cfg.RMQLogs(), "proxy.log"),
		Process: Process{
			ComponentName: "proxy",
			File:          filepath.Join(cfg.RunDir(), "proxy.pid"),
			Owner:         Owner{Dir: cfg.RMQHome(), Needle: ProxyMain},
			AdoptPort:     cfg.ProxyPort,
			StopSignal:    syscall.SIGTERM,
			StopTimeout:   90 * time.Second,
			Log:           log,
		},
	}}
}

// DependsOn implements Component: the name server and the brokers. The
// 5.5.0 proxy creates its system topic (DefaultHeartBeatSyncerTopic) on the
// cluster when it starts and exits when no broker of the cluster is
// registered yet, so Start also waits for the brokers' registration.
func (p *ClusterProxy) DependsOn() []string {
	deps := []string{"namesrv"}
	for _, b := range p.brokers {
		deps = append(deps, b.name)
	}
	return deps
}

// Grace implements Component.
func (p *ClusterProxy) Grace() time.Duration { return 60 * time.Second }

// Start implements Component.
func (p *ClusterProxy) Start(ctx context.Context) error {
	if p.cfg.RepoDir == "" {
		return errors.New("proxy: no repository dir: the config templates are in <repo>/deploy/local")
	}
	rt, java, err := p.runtime()
	if err != nil {
		return err
	}
	c := p.cfg
	conf := filepath.Join(p.home, "conf", "rmq-proxy.json")
	if err := render(filepath.Join(c.RepoDir, "deploy", "local", "rmq-proxy-cluster.json.tmpl"), conf, map[string]string{
		"NAMESRV_PORT": strconv.Itoa(c.NamesrvPort), "PROXY_PORT": strconv.Itoa(c.ProxyPort), "REMOTING_PORT": strconv.Itoa(c.RemotingPort),
	}); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if err := ensurePortsFree(ctx, "proxy", c.ProxyPort, c.RemotingPort); err != nil {
		return err
	}
	reg := &RocketMQResources{cfg: c, log: p.Log, brokers: p.brokers, RegistrationTimeout: 90 * time.Second}
	if err := reg.WaitRegistered(ctx); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	argv := jvmArgv(c, p.home, java, rt, c.ProxyJavaOpts, "proxy", ProxyMain, "-pm", "cluster", "-pc", conf)
	return p.launch(ctx, rt, argv, fmt.Sprintf("proxy: starting RocketMQ %s proxy (CLUSTER mode) gRPC 127.0.0.1:%d, remoting %d, name server %d (logs: %s)",
		rt.Version, c.ProxyPort, c.RemotingPort, c.NamesrvPort, p.logNames))
}

// Status implements Component.
func (p *ClusterProxy) Status(context.Context) StatusInfo {
	info := StatusInfo{
		Ports:  fmt.Sprintf("grpc %d,remoting %d", p.cfg.ProxyPort, p.cfg.RemotingPort),
		Detail: "CLUSTER mode",
	}
	if pid := p.PID(); pid != 0 {
		info.RSSKB = rssKB(pid)
	}
	return info
}

// RocketMQClusterStack returns the RocketMQ cluster mode of cfg (started on
// request: `seckill-stack up --rocketmq-cluster`), a stack of its own in
// <state>/rocketmq-cluster on the Cluster* ports of cfg, beside the default
// stack and sharing nothing with it but the service binary: a name server,
// broker-a and broker-b (standalone brokers of one cluster) and a proxy in
// CLUSTER mode; its resources are the topology applied to both brokers.
func RocketMQClusterStack(cfg Config, log *Logger) *Stack {
	cc := cfg.RocketMQCluster()
	a := NewBroker(cc, log, clusterBrokerA, cfg.ClusterBrokerPorts[0], cfg.ClusterMetricsPorts[0])
	b := NewBroker(cc, log, clusterBrokerB, cfg.ClusterBrokerPorts[1], cfg.ClusterMetricsPorts[1])
	s, err := New(cc, log, []Component{NewNameServer(cc, log), a, b, NewClusterProxy(cc, log, a, b)},
		[]Resource{newClusterResources(cc, log, []*Broker{a, b})})
	if err != nil {
		panic(err) // the list is consistent
	}
	return s
}

// ClusterBrokersRegistered reports whether the cluster mode's name server
// lists both brokers at their addresses.
func ClusterBrokersRegistered(ctx context.Context, cfg Config) (bool, error) {
	for i, name := range []string{clusterBrokerA, clusterBrokerB} {
		ok, err := brokerRegistered(ctx, cfg.ClusterNamesrvPort, name, cfg.ClusterBrokerPorts[i])
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// WriteExportLines writes `export NAME='VALUE'` lines of exports to w.
func WriteExportLines(w io.Writer, exports []Export) error {
	for _, e := range exports {
		if _, err := fmt.Fprintf(w, "export %s='%s'\n", e.Name, e.Value); err != nil {
			return fmt.Errorf("write exports: %w", err)
		}
	}
	return nil
}
