-- The same four runs written by attnd to PostgreSQL at fleet schema version 1 (before the
-- history columns), as pg_dump --no-owner --no-privileges prints it: tests/api/test_history_migration.py
-- loads it into a fresh database.
--
-- PostgreSQL database dump
--

\restrict PlBbn8KyTd51H8OASEKtxyHNTaohIxxTsv0m72ruccnL2UiPHDXtqRNdpnL5nJC

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: attnd_schema; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.attnd_schema (
    version integer NOT NULL
);


--
-- Name: fleet_position; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fleet_position (
    n bigint NOT NULL
);


--
-- Name: instances; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.instances (
    instance bigint NOT NULL,
    uuid uuid NOT NULL,
    node text NOT NULL,
    created timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: instances_instance_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.instances_instance_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: instances_instance_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.instances_instance_seq OWNED BY public.instances.instance;


--
-- Name: nodes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.nodes (
    instance bigint NOT NULL,
    node text NOT NULL,
    version text,
    devices text,
    started text,
    last_heartbeat timestamp with time zone NOT NULL
);


--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    id bigint NOT NULL,
    uuid uuid NOT NULL,
    seq bigint NOT NULL,
    node text NOT NULL,
    created text NOT NULL,
    backend text,
    device text,
    status text NOT NULL,
    version integer NOT NULL,
    median_us double precision,
    record text NOT NULL
);


--
-- Name: traces; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.traces (
    run_id bigint NOT NULL,
    json text NOT NULL
);


--
-- Name: instances instance; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.instances ALTER COLUMN instance SET DEFAULT nextval('public.instances_instance_seq'::regclass);


--
-- Data for Name: attnd_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.attnd_schema (version) FROM stdin;
1
\.


--
-- Data for Name: fleet_position; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.fleet_position (n) FROM stdin;
4
\.


--
-- Data for Name: instances; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.instances (instance, uuid, node, created) FROM stdin;
1	46dff124-a012-4a69-832d-f591aaaa00dd	old-node	2026-12-04 22:11:36.611576+00
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.nodes (instance, node, version, devices, started, last_heartbeat) FROM stdin;
1	old-node	0.1.0 (880077a94c21)	[{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816,"state":"up","restarts":0}]	2026-12-04T22:11:36.586Z	2026-12-04 22:11:36.701646+00
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.runs (id, uuid, seq, node, created, backend, device, status, version, median_us, record) FROM stdin;
4294967297	b40e6e11-28aa-4e85-ba3e-b4629aa57095	1	old-node	2026-12-04T22:11:38.596Z	reference	cpu	done	3	1057.7080007642508	{"id":4294967297,"status":"done","created":"2026-12-04T22:11:38.596Z","finished":"2026-12-04T22:11:38.598Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"880077a94c21","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T22:07:14Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":1057.7080007642508,"mean_us":1057.7080007642508,"min_us":1057.7080007642508,"max_us":1057.7080007642508,"p10_us":1057.7080007642508,"p90_us":1057.7080007642508,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":1057.7080007642508,"total_ms":1.0595009997487068,"clocks":{"sm_min_mhz":0,"sm_max_mhz":0,"sm_limit_mhz":0,"throttled":false,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,16,8],"dtype":"bf16","sum":-7.9818115234375,"abs_sum":121.7154541015625,"nan":0,"inf":0,"fingerprint":"a531eed5ed4a689f"},"verify":null,"perf":{"flops":8192,"tflops":7.7450487224081131e-06,"bytes":2048,"gbps":0.0019362621806020284,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":1.0595009997487068,"forwards":1,"why":"the cpu device has no energy counter"}}
4294967298	9aae4cdd-1107-43be-82b0-10b5b42e765e	2	old-node	2026-12-04T22:11:38.607Z	reference	cpu	done	3	59.668999165296555	{"id":4294967298,"status":"done","created":"2026-12-04T22:11:38.607Z","finished":"2026-12-04T22:11:38.607Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"880077a94c21","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T22:07:14Z"},"params":{"backend":"reference","device":"cpu","batch":2,"heads":4,"kv_heads":2,"seq_q":8,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":59.668999165296555,"mean_us":59.668999165296555,"min_us":59.668999165296555,"max_us":59.668999165296555,"p10_us":59.668999165296555,"p90_us":59.668999165296555,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":59.668999165296555,"total_ms":0.059988999739289284,"clocks":{"sm_min_mhz":0,"sm_max_mhz":0,"sm_limit_mhz":0,"throttled":false,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[2,4,8,8],"dtype":"bf16","sum":10.2626953125,"abs_sum":261.72991943359375,"nan":0,"inf":0,"fingerprint":"fa44a51790074435"},"verify":null,"perf":{"flops":9216,"tflops":0.0001544520626945595,"bytes":4096,"gbps":0.068645361197582,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.059988999739289284,"forwards":1,"why":"the cpu device has no energy counter"}}
4294967299	9fccd41d-ff41-41b7-a622-3c1f40e1e816	3	old-node	2026-12-04T22:11:38.624Z	reference	cpu	done	3	1473.0390002951026	{"id":4294967299,"status":"done","created":"2026-12-04T22:11:38.624Z","finished":"2026-12-04T22:11:38.626Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"880077a94c21","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T22:07:14Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,"head_dim_v":4,"dtype":"fp16","mask":"causal","causal":true,"window":3,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":1473.0390002951026,"mean_us":1473.0390002951026,"min_us":1473.0390002951026,"max_us":1473.0390002951026,"p10_us":1473.0390002951026,"p90_us":1473.0390002951026,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":1473.0390002951026,"total_ms":1.4735790006816387,"clocks":{"sm_min_mhz":0,"sm_max_mhz":0,"sm_limit_mhz":0,"throttled":false,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,16,4],"dtype":"fp16","sum":25.382293701171875,"abs_sum":66.203155517578125,"nan":0,"inf":0,"fingerprint":"0424574bb258cfe5"},"verify":null,"perf":{"flops":2784,"tflops":1.8899703262726e-06,"bytes":1536,"gbps":0.0010427422489779864,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":1.4735790006816387,"forwards":1,"why":"the cpu device has no energy counter"}}
4294967300	7ea19648-80f3-4559-8c0e-2848b2ea9089	4	old-node	2026-12-04T22:11:38.638Z	reference	cpu	done	3	712.6839999109507	{"id":4294967300,"status":"done","created":"2026-12-04T22:11:38.638Z","finished":"2026-12-04T22:11:38.640Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"880077a94c21","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T22:07:14Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"none","causal":false,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":712.68399991095066,"mean_us":712.68399991095066,"min_us":712.68399991095066,"max_us":712.68399991095066,"p10_us":712.68399991095066,"p90_us":712.68399991095066,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":712.68399991095066,"total_ms":0.7129139993339777,"clocks":{"sm_min_mhz":0,"sm_max_mhz":0,"sm_limit_mhz":0,"throttled":false,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,16,8],"dtype":"bf16","sum":-4.9563816785812378,"abs_sum":81.606217503547668,"nan":0,"inf":0,"fingerprint":"9714effe58f54376"},"verify":null,"perf":{"flops":16384,"tflops":2.2989150874787659e-05,"bytes":2048,"gbps":0.0028736438593484574,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.7129139993339777,"forwards":1,"why":"the cpu device has no energy counter"}}
\.


--
-- Data for Name: traces; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.traces (run_id, json) FROM stdin;
\.


--
-- Name: instances_instance_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.instances_instance_seq', 1, true);


--
-- Name: instances instances_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.instances
    ADD CONSTRAINT instances_pkey PRIMARY KEY (instance);


--
-- Name: instances instances_uuid_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.instances
    ADD CONSTRAINT instances_uuid_key UNIQUE (uuid);


--
-- Name: nodes nodes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (instance);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: runs runs_seq_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_seq_key UNIQUE (seq);


--
-- Name: runs runs_uuid_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_uuid_key UNIQUE (uuid);


--
-- Name: traces traces_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.traces
    ADD CONSTRAINT traces_pkey PRIMARY KEY (run_id);


--
-- Name: runs_backend_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_backend_seq ON public.runs USING btree (backend, seq);


--
-- Name: runs_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_created ON public.runs USING btree (created);


--
-- Name: runs_device_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_device_seq ON public.runs USING btree (device, seq);


--
-- Name: runs_node_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_node_seq ON public.runs USING btree (node, seq);


--
-- Name: runs_status_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_status_seq ON public.runs USING btree (status, seq);


--
-- Name: nodes nodes_instance_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_instance_fkey FOREIGN KEY (instance) REFERENCES public.instances(instance);


--
-- PostgreSQL database dump complete
--

\unrestrict PlBbn8KyTd51H8OASEKtxyHNTaohIxxTsv0m72ruccnL2UiPHDXtqRNdpnL5nJC

