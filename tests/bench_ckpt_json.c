/*
 * bench_ckpt_json.c: why the runtime keeps its own JSON parser
 * (runtime/ckpt/json.c) rather than Jansson, which planc import uses.
 * Times both on a safetensors header of 20,000 tensors (what one file of a
 * sharded 70B checkpoint holds) and prints how each answers the hostile
 * headers test_ckpt holds the runtime to (and a u64 offset >= 2^63, which
 * the format allows). `make bench-json`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <jansson.h>
#include "ckpt_internal.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
    /* a safetensors header of 20000 tensors, as a sharded 70B checkpoint has per file */
    size_t cap=1<<24,len=0; char *s=malloc(cap); len+=sprintf(s+len,"{\"__metadata__\":{\"format\":\"pt\"}");
    unsigned long long off=0;
    for(int i=0;i<20000;i++){len+=sprintf(s+len,",\"model.layers.%d.self_attn.q_proj.weight\":{\"dtype\":\"BF16\",\"shape\":[4096,4096],\"data_offsets\":[%llu,%llu]}",i,off,off+33554432ULL);off+=33554432ULL;}
    len+=sprintf(s+len,"}");
    int reps=20; double t0=now();
    for(int r=0;r<reps;r++){js_doc d; if(js_parse(s,len,"h",&d)){puts("fail");return 1;} js_free(&d);}
    double t1=now();
    for(int r=0;r<reps;r++){json_error_t e; json_t *j=json_loadb(s,len,JSON_REJECT_DUPLICATES,&e); if(!j){puts(e.text);return 1;} json_decref(j);}
    double t2=now();
    printf("header %zu bytes, 20000 tensors: json.c %.2f ms, jansson %.2f ms per parse\n",len,(t1-t0)/reps*1e3,(t2-t1)/reps*1e3);
    const char *cases[][2]={{"trailing comma","{\"a\":1,}"},{"lone surrogate","{\"\\ud800\":1}"},{"control char","{\"a\tb\":1}"},{"dup","{\"a\":1,\"a\":2}"},{"not json","{not json}"},{"u64 max","{\"a\":18446744073709551615}"}};
    for(int i=0;i<6;i++){js_doc d; prt_status st=js_parse(cases[i][1],strlen(cases[i][1]),"h",&d); const char*m=st?prt_ckpt_last_error():"ok"; char a[200]; snprintf(a,sizeof a,"%s",m); if(!st) js_free(&d);
      json_error_t e; json_t*j=json_loadb(cases[i][1],strlen(cases[i][1]),JSON_REJECT_DUPLICATES,&e); printf("%-15s json.c: %-50s | jansson: %s (pos %d)\n",cases[i][0],a,j?"ok":e.text,j?0:e.position); json_decref(j);}
    char deep[300]; int n=0; n+=sprintf(deep,"{\"a\":"); for(int i=0;i<70;i++) deep[n++]='['; deep[n++]='1'; for(int i=0;i<70;i++) deep[n++]=']'; deep[n++]='}'; deep[n]=0;
    {js_doc d; prt_status st=js_parse(deep,strlen(deep),"h",&d); json_error_t e; json_t*j=json_loadb(deep,strlen(deep),0,&e); printf("depth 71       json.c: %s | jansson: %s\n", st?prt_ckpt_last_error():"ok", j?"ok":e.text); if(!st) js_free(&d); json_decref(j);}
    return 0;}
