-- The same two runs (tagged old) written by attnd to PostgreSQL at fleet schema version 2 (the
-- history columns, before studies), as pg_dump --no-owner --no-privileges prints it:
-- tests/api/test_studies_migration.py loads it into a fresh database.
--
-- PostgreSQL database dump
--

\restrict EqOoDBDjcye4WbmQWRRUbtefogpuNcVtcMURNkrh48QbiwUdjfZJaw6Yo0NlTxJ

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

--
-- Name: attnd_json_integer(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.attnd_json_integer(v jsonb) RETURNS bigint
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT CASE WHEN jsonb_typeof(v) = 'number' THEN (v #>> '{}')::numeric::bigint END $$;


--
-- Name: attnd_run_columns(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.attnd_run_columns() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ DECLARE r jsonb := NEW.record::jsonb; p jsonb := r -> 'params'; BEGIN  NEW.batch := attnd_json_integer(p -> 'batch');  NEW.heads := attnd_json_integer(p -> 'heads');  NEW.kv_heads := coalesce(attnd_json_integer(p -> 'kv_heads'), NEW.heads);  NEW.seq_q := attnd_json_integer(p -> 'seq_q');  NEW.seq_kv := attnd_json_integer(p -> 'seq_kv');  NEW.head_dim := attnd_json_integer(p -> 'head_dim');  NEW.head_dim_v := coalesce(attnd_json_integer(p -> 'head_dim_v'), NEW.head_dim);  NEW.window_size := attnd_json_integer(p -> 'window');  NEW.dtype := p ->> 'dtype';  NEW.mask := p ->> 'mask';  NEW.impl := coalesce(r ->> 'impl_used', p ->> 'impl');  NEW.device_name := r -> 'device' ->> 'name';  NEW.build_commit := r -> 'build' ->> 'commit';  NEW.tags := CASE WHEN jsonb_typeof(p -> 'tags') = 'array'   THEN ARRAY(SELECT jsonb_array_elements_text(p -> 'tags')) END;  RETURN NEW; END $$;


--
-- Name: attnd_run_tags(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.attnd_run_tags() RETURNS trigger
    LANGUAGE plpgsql
    AS $$ BEGIN  IF TG_OP <> 'INSERT' AND OLD.tags IS NOT NULL THEN   DELETE FROM run_tags WHERE seq = OLD.seq AND tag = ANY (OLD.tags);  END IF;  IF TG_OP <> 'DELETE' AND NEW.tags IS NOT NULL THEN   INSERT INTO run_tags(tag, seq) SELECT DISTINCT t, NEW.seq FROM unnest(NEW.tags) t ON CONFLICT DO NOTHING;  END IF;  RETURN NULL; END $$;


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
-- Name: run_tags; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_tags (
    tag text NOT NULL,
    seq bigint NOT NULL
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
    record text NOT NULL,
    batch bigint,
    heads bigint,
    kv_heads bigint,
    seq_q bigint,
    seq_kv bigint,
    head_dim bigint,
    head_dim_v bigint,
    window_size bigint,
    dtype text,
    mask text,
    impl text,
    device_name text,
    build_commit text,
    tags text[]
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
2
\.


--
-- Data for Name: fleet_position; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.fleet_position (n) FROM stdin;
2
\.


--
-- Data for Name: instances; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.instances (instance, uuid, node, created) FROM stdin;
1	99be4c7f-0141-4d48-8789-8e87d10d365e	old-node	2026-12-04 23:22:35.109608+00
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.nodes (instance, node, version, devices, started, last_heartbeat) FROM stdin;
1	old-node	0.1.0 (8eb924a97e06)	[{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816,"state":"up","restarts":0}]	2026-12-04T23:22:35.091Z	2026-12-04 23:22:35.162404+00
\.


--
-- Data for Name: run_tags; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.run_tags (tag, seq) FROM stdin;
old	1
old	2
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.runs (id, uuid, seq, node, created, backend, device, status, version, median_us, record, batch, heads, kv_heads, seq_q, seq_kv, head_dim, head_dim_v, window_size, dtype, mask, impl, device_name, build_commit, tags) FROM stdin;
4294967297	e4f5e93f-a239-4d7f-adbe-3d2256513763	1	old-node	2026-12-04T23:22:38.095Z	reference	cpu	done	3	3.4750010818243027	{"id":4294967297,"status":"done","created":"2026-12-04T23:22:38.095Z","finished":"2026-12-04T23:22:38.098Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"8eb924a97e06","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T23:17:01Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":3,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":3.4750010818243027,"mean_us":9.1366668542226162,"min_us":3.1339991837739944,"max_us":20.80100029706955,"p10_us":3.2021995633840561,"p90_us":17.3358004540205,"stdev_us":10.103047885319388,"spread":1.1057695378977452,"rse":0.63841634036695138,"iters":3,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":3.4750010818243027,"total_ms":0.027981000021100044,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,16,8],"dtype":"bf16","sum":-7.9818115234375,"abs_sum":121.7154541015625,"nan":0,"inf":0,"fingerprint":"a531eed5ed4a689f"},"verify":null,"perf":{"flops":8192,"tflops":0.0023574093380423844,"bytes":2048,"gbps":0.58935233451059621,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.027981000021100044,"forwards":3,"why":"the cpu device has no energy counter"},"service":{"queued_ms":1.7294160006713355,"store_running_ms":0.25683300009404775,"exchange_ms":0.3083909996348666,"worker_ms":{"request":0.044897000407218,"checks":0.035944000046583824,"inputs":0.0072700004238868132,"measure":0.03633499909483362,"final_forward":0.0030840001272736117,"output":0.0009720006346469745,"report":0.012468000932130963,"free":0.00023099892132449895,"total":0.14120100058789831}}}	1	2	2	16	16	8	8	\N	bf16	causal	\N	AMD EPYC	8eb924a97e06	{old}
4294967298	0e1c45fa-06f0-4776-826f-60cb98268c2e	2	old-node	2026-12-04T23:22:38.111Z	reference	cpu	done	3	10.125001892447472	{"id":4294967298,"status":"done","created":"2026-12-04T23:22:38.111Z","finished":"2026-12-04T23:22:38.112Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"8eb924a97e06","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-04T23:17:01Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":32,"seq_kv":32,"head_dim":8,"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":3,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":10.125001892447472,"mean_us":13.206667577226957,"min_us":9.664999321103096,"max_us":19.8300015181303,"p10_us":9.75699983537197,"p90_us":17.889001592993736,"stdev_us":5.7405848971121873,"spread":0.43467323331519447,"rse":0.25095870826405253,"iters":3,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":10.125001892447472,"total_ms":0.03992999903857708,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,32,8],"dtype":"bf16","sum":-3.9950103759765625,"abs_sum":172.22564697265625,"nan":0,"inf":0,"fingerprint":"339d20b92ba2f544"},"verify":null,"perf":{"flops":32768,"tflops":0.0032363450741122912,"bytes":4096,"gbps":0.40454313426403643,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.03992999903857708,"forwards":3,"why":"the cpu device has no energy counter"},"service":{"queued_ms":0.013310000213095918,"store_running_ms":0.15088500003912486,"exchange_ms":0.35775400101556443,"worker_ms":{"request":0.021292000383255072,"checks":0.031536999813397415,"inputs":0.0081019989011110738,"measure":0.040980999983730726,"final_forward":0.00957400152401533,"output":0.0016529993445146829,"report":0.00844200076244306,"free":0.00021099913283251226,"total":0.12179199984529987}}}	1	2	2	32	32	8	8	\N	bf16	causal	\N	AMD EPYC	8eb924a97e06	{old}
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
-- Name: run_tags run_tags_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_tags
    ADD CONSTRAINT run_tags_pkey PRIMARY KEY (tag, seq);


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
-- Name: runs_batch_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_batch_seq ON public.runs USING btree (batch, seq);


--
-- Name: runs_build_commit_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_build_commit_seq ON public.runs USING btree (build_commit, seq);


--
-- Name: runs_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_created ON public.runs USING btree (created);


--
-- Name: runs_device_name_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_device_name_seq ON public.runs USING btree (device_name, seq);


--
-- Name: runs_device_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_device_seq ON public.runs USING btree (device, seq);


--
-- Name: runs_dtype_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_dtype_seq ON public.runs USING btree (dtype, seq);


--
-- Name: runs_head_dim_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_head_dim_seq ON public.runs USING btree (head_dim, seq);


--
-- Name: runs_head_dim_v_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_head_dim_v_seq ON public.runs USING btree (head_dim_v, seq);


--
-- Name: runs_heads_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_heads_seq ON public.runs USING btree (heads, seq);


--
-- Name: runs_impl_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_impl_seq ON public.runs USING btree (impl, seq);


--
-- Name: runs_kv_heads_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_kv_heads_seq ON public.runs USING btree (kv_heads, seq);


--
-- Name: runs_mask_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_mask_seq ON public.runs USING btree (mask, seq);


--
-- Name: runs_node_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_node_seq ON public.runs USING btree (node, seq);


--
-- Name: runs_seq_kv_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_seq_kv_seq ON public.runs USING btree (seq_kv, seq);


--
-- Name: runs_seq_q_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_seq_q_seq ON public.runs USING btree (seq_q, seq);


--
-- Name: runs_status_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_status_seq ON public.runs USING btree (status, seq);


--
-- Name: runs_window_size_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_window_size_seq ON public.runs USING btree (window_size, seq);


--
-- Name: runs runs_columns; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_columns BEFORE INSERT OR UPDATE OF record ON public.runs FOR EACH ROW EXECUTE FUNCTION public.attnd_run_columns();


--
-- Name: runs runs_tags_delete; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_tags_delete AFTER DELETE ON public.runs FOR EACH ROW WHEN ((old.tags IS NOT NULL)) EXECUTE FUNCTION public.attnd_run_tags();


--
-- Name: runs runs_tags_insert; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_tags_insert AFTER INSERT ON public.runs FOR EACH ROW WHEN ((new.tags IS NOT NULL)) EXECUTE FUNCTION public.attnd_run_tags();


--
-- Name: runs runs_tags_update; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_tags_update AFTER UPDATE ON public.runs FOR EACH ROW WHEN ((old.tags IS DISTINCT FROM new.tags)) EXECUTE FUNCTION public.attnd_run_tags();


--
-- Name: nodes nodes_instance_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.nodes
    ADD CONSTRAINT nodes_instance_fkey FOREIGN KEY (instance) REFERENCES public.instances(instance);


--
-- PostgreSQL database dump complete
--

\unrestrict EqOoDBDjcye4WbmQWRRUbtefogpuNcVtcMURNkrh48QbiwUdjfZJaw6Yo0NlTxJ

