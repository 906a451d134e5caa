// The few cacache calls the benchmark makes (cacache ships no types).
declare module 'cacache' {
  interface GetResult {
    data: Buffer;
    integrity: string;
    size: number;
  }
  interface Get {
    (cache: string, key: string): Promise<GetResult>;
    info(cache: string, key: string): Promise<{ path: string; integrity: string } | null>;
  }
  const cacache: {
    get: Get;
    put(cache: string, key: string, data: Uint8Array): Promise<string>;
  };
  export default cacache;
}
