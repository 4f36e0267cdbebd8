-- The same four runs (tagged old) written by attnd to PostgreSQL at fleet schema version 3
-- (studies, before the serving columns), as pg_dump --no-owner --no-privileges prints it:
-- tests/api/test_serving_history.py loads it into a fresh database.
--
-- PostgreSQL database dump
--

\restrict mDbcQsv4MqiqB9DYkuJjZFrM8FKHuF2ukSjbfRf8udeMRmQuGCwVcFZ6CcpPEKj

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
-- Name: studies; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.studies (
    id bigint NOT NULL,
    uuid uuid NOT NULL,
    seq bigint NOT NULL,
    node text NOT NULL,
    created text NOT NULL,
    status text NOT NULL,
    version integer NOT NULL,
    record text NOT NULL
);


--
-- Name: studies_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.studies_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: studies_seq_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.studies_seq_seq OWNED BY public.studies.seq;


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
-- Name: studies seq; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.studies ALTER COLUMN seq SET DEFAULT nextval('public.studies_seq_seq'::regclass);


--
-- Data for Name: attnd_schema; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.attnd_schema (version) FROM stdin;
3
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
1	1aa15ea5-bd7e-48d7-8e85-42fa94250c33	old-node	2026-12-05 00:13:02.593425+00
\.


--
-- Data for Name: nodes; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.nodes (instance, node, version, devices, started, last_heartbeat) FROM stdin;
1	old-node	0.1.0 (e7e07f5388bc)	[{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816,"state":"up","restarts":0}]	2026-12-05T00:13:02.559Z	2026-12-05 00:13:02.641532+00
\.


--
-- Data for Name: run_tags; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.run_tags (tag, seq) FROM stdin;
old	1
old	2
old	3
old	4
\.


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.runs (id, uuid, seq, node, created, backend, device, status, version, median_us, record, batch, heads, kv_heads, seq_q, seq_kv, head_dim, head_dim_v, window_size, dtype, mask, impl, device_name, build_commit, tags) FROM stdin;
4294967297	0c0cfbeb-a27d-4ff1-95bb-5e7c36c732d4	1	old-node	2026-12-05T00:13:02.650Z	reference	cpu	done	3	21.763000637292862	{"id":4294967297,"status":"done","created":"2026-12-05T00:13:02.650Z","finished":"2026-12-05T00:13:02.654Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"e7e07f5388bc","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-05T00:10:22Z"},"params":{"backend":"reference","device":"cpu","batch":1,"heads":2,"seq_q":16,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"causal","causal":true,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":21.763000637292862,"mean_us":21.763000637292862,"min_us":21.763000637292862,"max_us":21.763000637292862,"p10_us":21.763000637292862,"p90_us":21.763000637292862,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":21.763000637292862,"total_ms":0.02231300063431263,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[1,2,16,8],"dtype":"bf16","sum":-7.9818115234375,"abs_sum":121.7154541015625,"nan":0,"inf":0,"fingerprint":"a531eed5ed4a689f"},"verify":null,"perf":{"flops":8192,"tflops":0.000376418681253093,"bytes":2048,"gbps":0.094104670313273242,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.02231300063431263,"forwards":1,"why":"the cpu device has no energy counter"},"service":{"queued_ms":0.023454998881788924,"store_running_ms":3.167236000081175,"exchange_ms":0.25647300026321318,"worker_ms":{"request":0.038808000681456178,"checks":0.039497999750892632,"inputs":0.006689999281661585,"measure":0.024797000151011162,"final_forward":0.0032850002753548324,"output":0.00096199983090627939,"report":0.011136000466649421,"free":0.00023099892132449895,"total":0.12540699935925659}}}	1	2	2	16	16	8	8	\N	bf16	causal	\N	AMD EPYC	e7e07f5388bc	{old}
4294967298	a059c820-6a02-4208-8391-61085549d784	2	old-node	2026-12-05T00:13:02.657Z	reference	cpu	done	3	9.95500013232231	{"id":4294967298,"status":"done","created":"2026-12-05T00:13:02.657Z","finished":"2026-12-05T00:13:02.658Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"e7e07f5388bc","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-05T00:10:22Z"},"params":{"backend":"reference","device":"cpu","batch":2,"heads":2,"seq_q":1,"seq_kv":40,"head_dim":8,"dtype":"bf16","mask":"causal_bottom_right","causal":true,"page_size":16,"num_pages":8,"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":9.95500013232231,"mean_us":9.95500013232231,"min_us":9.95500013232231,"max_us":9.95500013232231,"p10_us":9.95500013232231,"p90_us":9.95500013232231,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":9.95500013232231,"total_ms":0.010314999148249626,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[2,2,1,8],"dtype":"bf16","sum":-0.498260498046875,"abs_sum":6.754608154296875,"nan":0,"inf":0,"fingerprint":"9cc90aef505ed6d4"},"verify":null,"perf":{"flops":5120,"tflops":0.00051431440803061058,"bytes":5272,"gbps":0.52958311701901939,"tokens_q":2,"tokens_kv":80,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.010314999148249626,"forwards":1,"why":"the cpu device has no energy counter"},"service":{"queued_ms":0.6088890004321,"store_running_ms":0.14938300046196673,"exchange_ms":0.23708399930910673,"worker_ms":{"request":0.017976999515667558,"checks":0.027580999812926166,"inputs":0.023766000595060177,"measure":0.010686000678106211,"final_forward":0.00299400016956497,"output":0.000149999323184602,"report":0.00695100061420817,"free":0.000209998688660562,"total":0.0903149993973784}}}	2	2	2	1	40	8	8	\N	bf16	causal_bottom_right	\N	AMD EPYC	e7e07f5388bc	{old}
4294967299	53aeb5f6-c84b-425a-9f59-4f17150f9b52	3	old-node	2026-12-05T00:13:02.660Z	reference	cpu	done	3	3.2749995589256287	{"id":4294967299,"status":"done","created":"2026-12-05T00:13:02.660Z","finished":"2026-12-05T00:13:02.662Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"e7e07f5388bc","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-05T00:10:22Z"},"params":{"backend":"reference","device":"cpu","batch":3,"heads":2,"seq_q":1,"seq_kv":16,"head_dim":8,"dtype":"bf16","mask":"causal_bottom_right","causal":true,"seqlens_kv":[16,0,7],"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":3.2749995589256287,"mean_us":3.2749995589256287,"min_us":3.2749995589256287,"max_us":3.2749995589256287,"p10_us":3.2749995589256287,"p90_us":3.2749995589256287,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":3.2749995589256287,"total_ms":0.00353500060737133,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[3,2,8],"dtype":"bf16","sum":-4.29150390625,"abs_sum":15.56787109375,"nan":0,"inf":0,"fingerprint":"83fe4fb402b273f7"},"verify":null,"perf":{"flops":1472,"tflops":0.00044946570938864285,"bytes":1696,"gbps":0.51786266516517543,"tokens_q":3,"tokens_kv":23,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.00353500060737133,"forwards":1,"why":"the cpu device has no energy counter"},"service":{"queued_ms":0.92902700089325663,"store_running_ms":0.14741999984835275,"exchange_ms":0.46730699978070334,"worker_ms":{"request":0.01840699951571878,"checks":0.026399999114801176,"inputs":0.0032150001061381772,"measure":0.0039650003600399941,"final_forward":0.0012119999155402184,"output":0.00020100014808122069,"report":0.0055780001275707036,"free":0.00016000012692529708,"total":0.059137999414815567}}}	3	2	2	1	16	8	8	\N	bf16	causal_bottom_right	\N	AMD EPYC	e7e07f5388bc	{old}
4294967300	e3c01528-3924-457e-b59b-624c7803ed2c	4	old-node	2026-12-05T00:13:02.663Z	reference	cpu	done	3	8.24200175702572	{"id":4294967300,"status":"done","created":"2026-12-05T00:13:02.663Z","finished":"2026-12-05T00:13:02.664Z","node":"old-node","backend":"reference","build":{"version":"0.1.0","commit":"e7e07f5388bc","dirty":true,"compiler":"gcc 12.2.0","nvcc":"13.0.88","cuda_toolkit":"13.0","gencode":"sm_90a","built":"2026-12-05T00:10:22Z"},"params":{"backend":"reference","device":"cpu","batch":2,"heads":2,"seq_q":2,"seq_kv":33,"head_dim":8,"dtype":"bf16","mask":"causal_bottom_right","causal":true,"page_size":8,"num_pages":16,"seqlens_q":[1,2],"seqlens_kv":[33,17],"scale":0.35355339059327373,"seed":0,"warmup":0,"iters":1,"min_iters":10,"max_iters":1000,"min_time_ms":20,"max_time_ms":2000,"target_noise":0.005,"cache":"hot","graph":false,"verify":false,"profile":true,"verify_cpu_max_macs":1000000000,"tags":["old"]},"device":{"id":"cpu","kind":"cpu","name":"AMD EPYC","cores":2,"memory_total_bytes":25276194816},"timing":{"median_us":8.24200175702572,"mean_us":8.24200175702572,"min_us":8.24200175702572,"max_us":8.24200175702572,"p10_us":8.24200175702572,"p90_us":8.24200175702572,"stdev_us":0,"spread":null,"rse":null,"iters":1,"warmup":0,"stop_reason":"iters","cache":"hot","graph":false,"host_us":8.24200175702572,"total_ms":0.00840199925005436,"clocks":{"sm_min_mhz":null,"sm_max_mhz":null,"sm_limit_mhz":null,"throttled":null,"power_min_w":null,"power_max_w":null,"event_reasons":null}},"kernels":null,"output":{"shape":[3,2,8],"dtype":"bf16","sum":-0.86297607421875,"abs_sum":12.176513671875,"nan":0,"inf":0,"fingerprint":"689d4b7f007bb77c"},"verify":null,"perf":{"flops":4224,"tflops":0.00051249685750180067,"bytes":3448,"gbps":0.41834497269559867,"tokens_q":3,"tokens_kv":50,"peak_tflops":null,"peak_tflops_basis":"the cpu device runs the fp64 reference: no peak table","peak_gbps":null,"peak_gbps_basis":"the cpu device runs the fp64 reference: no peak table","fraction_of_peak":{"compute":null,"bandwidth":null},"suspect":false,"suspect_reason":null},"energy":{"joules_per_forward":null,"avg_power_w":null,"tflop_per_joule":null,"window_ms":0.00840199925005436,"forwards":1,"why":"the cpu device has no energy counter"},"service":{"queued_ms":0.046098999519017525,"store_running_ms":0.19325800167280249,"exchange_ms":0.15269799951056484,"worker_ms":{"request":0.016043999494286254,"checks":0.022143000023788773,"inputs":0.017897000361699611,"measure":0.00878300124895759,"final_forward":0.002472999767633155,"output":0.00019099934434052557,"report":0.0062189992604544386,"free":0.000200001522898674,"total":0.073950001024059}}}	2	2	2	2	33	8	8	\N	bf16	causal_bottom_right	\N	AMD EPYC	e7e07f5388bc	{old}
\.


--
-- Data for Name: studies; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.studies (id, uuid, seq, node, created, status, version, record) FROM stdin;
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
-- Name: studies_seq_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.studies_seq_seq', 1, false);


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
-- Name: studies studies_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.studies
    ADD CONSTRAINT studies_pkey PRIMARY KEY (id);


--
-- Name: studies studies_seq_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.studies
    ADD CONSTRAINT studies_seq_key UNIQUE (seq);


--
-- Name: studies studies_uuid_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.studies
    ADD CONSTRAINT studies_uuid_key UNIQUE (uuid);


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
-- Name: studies_status_seq; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX studies_status_seq ON public.studies USING btree (status, seq);


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

\unrestrict mDbcQsv4MqiqB9DYkuJjZFrM8FKHuF2ukSjbfRf8udeMRmQuGCwVcFZ6CcpPEKj

